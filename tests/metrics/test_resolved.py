"""Metrics on resolved labels: equal to scikit-learn on the resolved values; before/after view.

The review below is written through ``append_label`` (votes, adjudications) on the sliced
benchmark of :mod:`tests.metrics.test_service`; the expected resolved values are spelled out
here, independently of :mod:`app.services.evidence.resolution`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from sklearn.metrics import average_precision_score, brier_score_loss, roc_auc_score
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import InvalidInput, NotFound
from app.services.evidence.labels import append_label
from app.services.evidence.resolution import ADJUDICATION, VOTE
from app.services.metrics.judge_summary import judge_summaries
from app.services.metrics.metrics_compare import compare_metrics
from app.services.metrics.report import load_labelled, metric_rows, metrics_report
from app.sql.cache import VersionedCache
from app.stats.summary import summarise
from app.tables import Instance
from tests.metrics.test_service import RESAMPLES, _slice_items, build

OTHER = {"A": "B", "B": "A"}
EXTRA = "extra"  # an item with no original label that two votes label "A"


def _items() -> list[dict[str, Any]]:
    items = _slice_items()
    for i, item in enumerate(items):
        if i % 2 == 0:  # a second detector that scored half the items
            item["scores"]["half"] = item["scores"]["probe"] ** 2
    items.append({"id": EXTRA, "group": "q-extra", "scores": {"probe": 0.9}})
    return items


def _review(session: Session, items: list[dict[str, Any]]) -> None:
    """Votes and adjudications on ``reference``; see :func:`_expected` for their outcome."""
    ids = {ext: iid for ext, iid in session.execute(select(Instance.external_id, Instance.id))}

    def write(i: int | str, value: str | None, source: str, author: str) -> None:
        ext = items[i]["id"] if isinstance(i, int) else i
        append_label(session, ids[ext], "reference", value, source=source, author=author)

    for i in range(24):
        original = items[i]["labels"]["reference"]
        if i % 4 == 0:  # two agreeing votes against the original
            write(i, OTHER[original], VOTE, "alice")
            write(i, OTHER[original], VOTE, "bob")
    write(1, None, ADJUDICATION, "carol")  # adjudicated to no label
    write(3, OTHER[items[3]["labels"]["reference"]], VOTE, "alice")  # one vote: k=1 only
    write(5, items[5]["labels"]["reference"], VOTE, "alice")  # agreeing votes...
    write(5, items[5]["labels"]["reference"], VOTE, "bob")
    write(5, OTHER[items[5]["labels"]["reference"]], ADJUDICATION, "carol")  # ...overruled
    write(7, OTHER[items[7]["labels"]["reference"]], VOTE, "alice")  # split votes
    write(7, items[7]["labels"]["reference"], VOTE, "bob")
    write(EXTRA, "A", VOTE, "alice")
    write(EXTRA, "A", VOTE, "bob")


def _expected(items: list[dict[str, Any]], k: int) -> dict[str, str]:
    """``{external id: resolved reference}`` of the review in :func:`_review`, nulls left out."""
    out: dict[str, str] = {}
    for i, item in enumerate(items[:24]):
        value = item["labels"]["reference"]
        if i % 4 == 0 or i == 5 or (i == 3 and k == 1):
            value = OTHER[value]
        if i != 1:
            out[item["id"]] = value
    out[EXTRA] = "A"
    return out


@pytest.fixture
def reviewed(factory: sessionmaker[Session]) -> list[dict[str, Any]]:
    items = _items()
    with transaction(factory) as session:
        build(session, items)
        _review(session, items)
    return items


def _close(a: float | None, b: float) -> bool:
    return a is not None and math.isclose(a, b, rel_tol=0, abs_tol=1e-12)


def _check_against_sklearn(row: Any, labels: dict[str, str], items: list[dict[str, Any]]) -> None:
    scored = [it for it in items if it["id"] in labels and row.detector in it["scores"]]
    y = np.array([int(labels[it["id"]] == "A") for it in scored])
    p = np.array([it["scores"][row.detector] for it in scored])
    groups = [it.get("group", it["id"]) for it in scored]
    assert row.n == len(scored)
    assert _close(row.values["prevalence"], float(y.mean()))
    assert _close(row.values["auroc"], roc_auc_score(y, p))
    assert _close(row.values["auprc"], average_precision_score(y, p))
    assert _close(row.values["brier"], brier_score_loss(y, p))
    # Same items, groups and seed: the intervals are exactly app.stats' (item order is moot).
    expected = summarise(y, p, groups, resamples=RESAMPLES, seed=0)
    for metric in ("auroc", "auprc", "brier"):
        assert row.intervals[metric] == pytest.approx(expected[f"{metric}_ci"], abs=1e-12)


@pytest.mark.parametrize("k", [1, 2])
def test_resolved_metrics_equal_sklearn(
    reviewed: list[dict[str, Any]], factory: sessionmaker[Session], k: int
) -> None:
    with factory() as session:
        _, rows = metric_rows(
            session, "bench", labels="resolved", k=k, resamples=RESAMPLES, cache=None
        )
        items = load_labelled(session, "bench", "reference", labels="resolved", k=k)
    expected = _expected(reviewed, k)
    assert dict(zip(items.external_ids, items.values, strict=True)) == expected
    assert [r.detector for r in rows] == ["half", "probe"]
    for row in rows:
        _check_against_sklearn(row, expected, reviewed)


def test_original_metrics_ignore_the_review(
    reviewed: list[dict[str, Any]], factory: sessionmaker[Session]
) -> None:
    with factory() as session:
        _, rows = metric_rows(session, "bench", resamples=RESAMPLES, cache=None)
    original = {it["id"]: it["labels"]["reference"] for it in reviewed[:24]}
    # Both detectors have a row (so the checks below run), each over the items it scored.
    assert [r.detector for r in rows] == ["half", "probe"]
    assert [r.n for r in rows] == [12, 24]
    for row in rows:
        _check_against_sklearn(row, original, reviewed)


def test_cache_keeps_label_modes_apart(
    reviewed: list[dict[str, Any]], factory: sessionmaker[Session]
) -> None:
    cache = VersionedCache()
    args: dict[str, Any] = {"detectors": ["probe"], "resamples": RESAMPLES, "cache": cache}
    with factory() as session:
        _, original = metric_rows(session, "bench", **args)
        _, original_k1 = metric_rows(session, "bench", k=1, **args)
        _, resolved = metric_rows(session, "bench", labels="resolved", **args)
        _, resolved_k1 = metric_rows(session, "bench", labels="resolved", k=1, **args)
    # k only shapes resolved labels: the original rows are one entry.
    assert original_k1 == original and cache.hits == 1 and cache.misses == 3
    assert len({r[0].values["auroc"] for r in (original, resolved, resolved_k1)}) == 3


def test_report_and_judges_follow_the_labels(
    reviewed: list[dict[str, Any]], factory: sessionmaker[Session]
) -> None:
    with factory() as session:
        report = metrics_report(session, "bench", labels="resolved", k=1, resamples=RESAMPLES)
        (judge,) = judge_summaries(session, "bench", labels="resolved", k=1, resamples=RESAMPLES)
    assert (report["labels"], report["k"]) == ("resolved", 1)
    assert report["judges"] == [judge.as_dict()]
    expected = _expected(reviewed, 1)
    judged = [it for it in reviewed[:24] if it["id"] in expected]
    correct = sum(it["judgments"]["judge"]["AB"][0] == expected[it["id"]] for it in judged)
    assert judge.referenced == len(judged) == 23
    assert _close(judge.accuracy_ab, correct / len(judged))


def test_compare_metrics_counts_changed_items(
    reviewed: list[dict[str, Any]], factory: sessionmaker[Session]
) -> None:
    with factory() as session:
        found = compare_metrics(session, "bench", "reference", k=2, resamples=RESAMPLES)
        _, before = metric_rows(session, "bench", resamples=RESAMPLES)
        _, after = metric_rows(session, "bench", labels="resolved", resamples=RESAMPLES)
    # Items 0, 4, ..., 20 (votes) and 5 (adjudication) relabelled, 1 unlabelled, extra labelled.
    assert (found.changed, found.relabelled, found.unlabelled, found.labelled) == (9, 7, 1, 1)
    assert (found.positive, found.negative, found.k) == ("A", "B", 2)
    by_name = {d.detector: d for d in found.detectors}
    assert list(by_name) == ["half", "probe"]
    # "half" scored the even items only: the six voted ones; "probe" every changed item.
    assert (by_name["half"].changed, by_name["probe"].changed) == (6, 9)
    for name, d in by_name.items():
        assert d.original == tuple(r for r in before if r.detector == name)
        assert d.resolved == tuple(r for r in after if r.detector == name)
    assert found.as_dict()["detectors"][1]["resolved"][0] == after[1].as_dict()


def test_bad_label_modes(reviewed: list[dict[str, Any]], factory: sessionmaker[Session]) -> None:
    with factory() as session:
        with pytest.raises(InvalidInput, match="labels must be one of"):
            metric_rows(session, "bench", labels="latest", cache=None)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="k must be"):
            metric_rows(session, "bench", labels="resolved", k=0, cache=None)
        with pytest.raises(InvalidInput, match="k must be"):
            compare_metrics(session, "bench", "reference", k=0)
        with pytest.raises(NotFound, match="no resolved value of label set 'missing'"):
            load_labelled(session, "bench", "missing", labels="resolved")
