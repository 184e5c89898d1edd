"""Judge summary: the real o1-mini outputs recomputed from the raw file, and the repeat control."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import NotFound
from app.ingest.judgebench import import_judgebench
from app.services.evidence.benchmarks import bump_data_version
from app.services.metrics.judge_summary import judge_summaries
from app.sql.cache import VersionedCache
from app.tables import Benchmark, Judgment
from tests.ingest.test_helpers import O1_MINI, O1_MINI_JUDGE, PAIRS_GPT4O, read_jsonl
from tests.metrics.test_service import build

MIRROR = {"A>B": "B>A", "B>A": "A>B", "A=B": "A=B", None: None}


def test_o1_mini_equals_raw_recomputation(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as session:
        import_judgebench(session, PAIRS_GPT4O, outputs=[O1_MINI])
    with factory() as session:
        (summary,) = judge_summaries(session, "judgebench", resamples=200, cache=None)
    rows = read_jsonl(O1_MINI)
    flips = retained = correct_ab = correct_both = 0
    agree = {True: [0, 0], False: [0, 0]}
    for row in rows:
        label = row["label"]
        opposite = MIRROR[label]
        d1 = row["judgments"][0]["decision"]
        d2 = MIRROR[row["judgments"][1]["decision"]]
        votes = sum((d == label) - (d == opposite) for d in (d1, d2))
        correct_both += votes > 0
        correct_ab += d1 == label
        if d1 is not None and d2 is not None:
            retained += 1
            flipped = d1 != d2
            flips += flipped
            agree[flipped][0] += d1 == label
            agree[flipped][1] += 1
    assert (flips, retained, len(rows)) == (110, 350, 350)
    assert summary.judge == O1_MINI_JUDGE
    assert (summary.pairs, summary.retained, summary.flips) == (350, retained, flips)
    assert summary.flip_rate == pytest.approx(110 / 350)
    assert summary.accuracy_both_orders == pytest.approx(correct_both / 350)
    assert summary.accuracy_ab == pytest.approx(correct_ab / 350)
    assert summary.agreement_flip == pytest.approx(agree[True][0] / agree[True][1])
    assert summary.agreement_nonflip == pytest.approx(agree[False][0] / agree[False][1])
    assert summary.flip_rate_ci is not None
    low, high = summary.flip_rate_ci
    assert low < 110 / 350 < high and high - low < 0.2
    assert summary.repeat_pairs == 0 and summary.repeat_changed is None


def _judged(ab: str, ba: str | None, repeat: str | None, ref: str | None) -> dict[str, Any]:
    orders = {"AB": (ab, None, None)}
    if ba is not None:
        orders["BA"] = (ba, None, None)
    if repeat is not None:
        orders["AB-repeat"] = (repeat, None, None)
    return {"judgments": {"judge": orders}, "labels": {"reference": ref} if ref else {}}


def test_rules_repeat_control_and_cache(factory: sessionmaker[Session]) -> None:
    specs = [
        ("A", "A", "A", "A"),  # consistent, right; repeat unchanged
        ("A", "B", "B", "B"),  # flip; AB wrong; both orders tie (0 votes); repeat changed
        ("B", "B", None, "B"),  # consistent, right
        ("tie", "B", None, "B"),  # flip (tie vs B); AB wrong; both orders +1: right
        ("A", "invalid", None, "A"),  # not retained; AB right; both orders +1
        ("B", None, None, None),  # AB only, no reference: counts as a pair, not referenced
    ]
    items = [{"id": f"p{i}", **_judged(*spec)} for i, spec in enumerate(specs)]
    # A detector with AB judgments only is not a two-order judge.
    items[0]["judgments"]["ab-only"] = {"AB": ("A", None, None)}
    cache = VersionedCache()
    with transaction(factory) as session:
        build(session, items)
    with factory() as session:
        (summary,) = judge_summaries(session, "bench", resamples=200, cache=cache)
        assert judge_summaries(session, "bench", resamples=200, cache=cache)[0] is summary
        with pytest.raises(NotFound):
            judge_summaries(session, "nope")
    assert summary.judge == "judge"
    assert (summary.pairs, summary.retained, summary.flips, summary.referenced) == (6, 4, 2, 5)
    assert summary.flip_rate == 0.5
    assert summary.accuracy_ab == pytest.approx(3 / 5)
    assert summary.accuracy_both_orders == pytest.approx(4 / 5)
    assert summary.agreement_flip == 0.0
    assert summary.agreement_nonflip == 1.0
    assert (summary.repeat_pairs, summary.repeat_changed) == (2, 1)
    assert set(summary.as_dict()) >= {
        "judge", "pairs", "retained", "flips", "flip_rate", "flip_rate_ci", "accuracy_ab",
        "accuracy_both_orders", "agreement_flip", "agreement_nonflip",
    }  # fmt: skip
    with transaction(factory) as session:
        for j in session.scalars(select(Judgment).where(Judgment.order == "AB-repeat")):
            j.choice = "invalid"
        bench = session.scalar(select(Benchmark))
        assert bench is not None
        bump_data_version(session, bench)
    with factory() as session:
        (after,) = judge_summaries(session, "bench", resamples=200, cache=cache)
    assert after.repeat_changed == 2
