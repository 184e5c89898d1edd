"""The evidence wing: what is known about each instance.

Benchmarks, labels and their resolution, detectors and scores, language models, activation
sets, probes, judgments and flips, comments, graders and the option letters of choice items.
"""
