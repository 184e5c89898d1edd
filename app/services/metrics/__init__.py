"""The metrics wing: how good the detectors are.

Metric queries, the metric matrix and its kept results, comparisons, judge summaries, answer
metrics, plots and the label-error rankers.
"""
