"""A pytest plugin: the wall time of each test file (setup, call and teardown), slowest first.

``--durations`` names single tests; where a suite's time goes is clearer per file (a fixture
built for every test of a file counts there). Printed at the end of every run, so CI's log
says what to cut.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

_TOTALS: defaultdict[str, float] = defaultdict(float)
SHOWN = 40


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add the phase's duration to its file's total."""
    _TOTALS[report.nodeid.split("::", 1)[0]] += report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The slowest files and the share of the whole they take."""
    if not _TOTALS:
        return
    whole = sum(_TOTALS.values())
    terminalreporter.section(f"wall time per test file (slowest {SHOWN})")
    ranked = sorted(_TOTALS.items(), key=lambda item: -item[1])
    for path, seconds in ranked[:SHOWN]:
        terminalreporter.write_line(f"{seconds:8.1f} s {100 * seconds / whole:5.1f}%  {path}")
    terminalreporter.write_line(f"{whole:8.1f} s in all, {len(_TOTALS)} files")
