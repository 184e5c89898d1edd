"""The disagreements wing: items where detectors contradict labels, judges or each other.

One class per mode in :mod:`app.services.disagreements.modes`; lists are ranked and kept.
"""
