"""The review wing: queues, votes and adjudication.

Queue sources, assignment, agreement between annotators, adjudication views and the defect
report.
"""
