"""Review events (votes, adjudications) never move the original labels every reader shows.

Browse, filters, facets, metrics, disagreements, judge summaries and derived flips read the
latest *original* event; review only changes the resolved value. ``append_label`` compares a
new event with its own history: the original, the author's vote, or the adjudication.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.disagreements.lists import disagreements
from app.services.evidence.flips import recompute_flips
from app.services.evidence.labels import (
    append_label,
    append_labels,
    current_labels,
    latest_event_ids,
    latest_label_values,
)
from app.services.evidence.resolution import ADJUDICATION, VOTE, resolved_labels
from app.services.metrics.judge_summary import judge_summaries
from app.services.metrics.report import metric_rows
from app.services.table.browse import benchmark_view
from app.services.table.instance_filter import InstanceFilter, LabelCondition
from app.tables import Benchmark, Instance, LabelEvent
from tests.support.factories import FLIP, PAIRWISE, PROBE, STATEMENTS, seed_benchmarks

REF = "reference"
OTHER = {"A": "B", "B": "A", "1": "0", "0": "1"}


def _ids(session: Session, bench: str) -> dict[str, int]:
    q = (
        select(Instance.external_id, Instance.id)
        .join(Benchmark, Benchmark.id == Instance.benchmark_id)
        .where(Benchmark.name == bench)
    )
    return {ext: iid for ext, iid in session.execute(q)}


def _bench_id(session: Session, bench: str) -> int:
    return session.scalars(select(Benchmark.id).where(Benchmark.name == bench)).one()


def _snapshot(factory: sessionmaker[Session]) -> dict[str, Any]:
    """Everything the dashboard derives from the current labels, without caches."""
    out: dict[str, Any] = {}
    with transaction(factory) as s:
        view = benchmark_view(s, PAIRWISE, InstanceFilter())
        out["rows"] = {r["external_id"]: r["labels"] for r in view.table.items}
        out["facets"] = {
            ls.name: [(v.value, v.count) for v in ls.values] for ls in view.facets.label_sets
        }
        for name in (REF, FLIP):
            for value in ("A", "B", "1", "0", None):
                flt = InstanceFilter(labels=(LabelCondition(name=name, value=value),))
                table = benchmark_view(s, PAIRWISE, flt).table
                # total is the counting form of the condition, items the per-row form.
                out[f"filter {name}={value}"] = (
                    table.total,
                    sorted(r["external_id"] for r in table.items),
                )
        ids = list(_ids(s, PAIRWISE).values())
        out["current_labels"] = current_labels(s, ids)
        out["latest_values"] = latest_label_values(s, REF, ids)
        out["latest_ids"] = sorted(s.scalars(latest_event_ids(REF)))
        _target, rows = metric_rows(s, STATEMENTS, "truth", resamples=50, cache=None)
        out["metrics"] = [r.as_dict() for r in rows]
        out["disagreements"] = disagreements(
            s, STATEMENTS, [PROBE], label="truth", min_confidence=0.5
        ).as_dict()
        out["judges"] = [
            j.as_dict() for j in judge_summaries(s, PAIRWISE, resamples=50, cache=None)
        ]
    return out


def _review_everything(factory: sessionmaker[Session]) -> None:
    """Two agreeing votes against every original label, and adjudications on some."""
    with transaction(factory) as s:
        for bench, names in ((PAIRWISE, (REF, FLIP)), (STATEMENTS, ("truth",))):
            ids = _ids(s, bench)
            for name in names:
                current = latest_label_values(s, name, ids.values())
                for iid in ids.values():
                    # Instances without the set get a vote too: review must not create it.
                    wanted = OTHER.get(current.get(iid) or "", "A" if name == REF else "1")
                    for author in ("alice", "bob"):
                        append_label(s, iid, name, wanted, source=VOTE, author=author)
        pairs = _ids(s, PAIRWISE)
        append_label(s, pairs["pair/002"], REF, None, source=ADJUDICATION, author="carol")
        truths = _ids(s, STATEMENTS)
        append_label(s, truths["cities-0001"], "truth", "0", source=ADJUDICATION, author="carol")


def test_review_events_leave_every_reader_on_the_original(
    factory: sessionmaker[Session],
) -> None:
    seed_benchmarks(factory)
    before = _snapshot(factory)
    _review_everything(factory)
    assert _snapshot(factory) == before
    with transaction(factory) as s:
        # The review did take effect where it should: in the resolved labels.
        resolved = resolved_labels(s, _bench_id(s, PAIRWISE), REF)
        assert all(r.changed for r in resolved.values())
        # Derived flips are compared with the original flip labels: nothing to re-append.
        assert recompute_flips(s, _bench_id(s, PAIRWISE)).events == 0


def test_vote_agreeing_with_the_original_is_recorded(factory: sessionmaker[Session]) -> None:
    seed_benchmarks(factory)
    with transaction(factory) as s:
        iid = _ids(s, PAIRWISE)["pair/002"]  # original reference: B

        def append(value: str | None, source: str, author: str = "") -> bool:
            return append_label(s, iid, REF, value, source=source, author=author) is not None

        assert append("B", VOTE, "alice")
        assert not append("B", VOTE, "alice")  # her vote is already B
        assert append("B", VOTE, "bob")  # another author's equal vote still counts
        assert not append(None, VOTE, "carol")  # nothing of carol's to withdraw
        assert append(None, VOTE, "alice")
        assert not append(None, VOTE, "alice")
        assert append("B", ADJUDICATION, "dave")  # the first adjudication, equal to original
        assert not append("B", ADJUDICATION, "erin")
        assert append(None, ADJUDICATION, "erin")  # "no label" is a decision, not a retraction
        assert not append(None, ADJUDICATION, "erin")
        assert append("A", ADJUDICATION, "erin")
        # Original sources compare with the latest original (B), not with the review events.
        assert not append("B", "import")
        assert append("A", "import")
        assert not append("A", "derived")
        history = [
            (e.source, e.author, e.value)
            for e in s.scalars(
                select(LabelEvent)
                .where(LabelEvent.instance_id == iid, LabelEvent.label_name == REF)
                .order_by(LabelEvent.id)
            )
        ]
        assert history[1:] == [
            (VOTE, "alice", "B"),
            (VOTE, "bob", "B"),
            (VOTE, "alice", None),
            (ADJUDICATION, "dave", "B"),
            (ADJUDICATION, "erin", None),
            (ADJUDICATION, "erin", "A"),
            ("import", "", "A"),
        ]


def test_bulk_append_follows_the_same_histories(factory: sessionmaker[Session]) -> None:
    seed_benchmarks(factory)
    with transaction(factory) as s:
        ids = _ids(s, PAIRWISE)
        original = latest_label_values(s, REF, ids.values())
        # Votes equal to the originals are all recorded, once per author.
        assert append_labels(s, REF, original, source=VOTE, author="alice") == len(original)
        assert append_labels(s, REF, original, source=VOTE, author="alice") == 0
        assert append_labels(s, REF, original, source=VOTE, author="bob") == len(original)
        flipped = {iid: OTHER[v] for iid, v in original.items() if v is not None}
        assert append_labels(s, REF, flipped, source=ADJUDICATION) == len(flipped)
        # A first null adjudication ("no label") is appended; a repeated one is not.
        none = dict.fromkeys(ids.values())
        assert append_labels(s, REF, none, source=ADJUDICATION) == len(none)
        assert append_labels(s, REF, none, source=ADJUDICATION) == 0
        # A null vote withdraws nothing where the author has not voted.
        assert append_labels(s, REF, none, source=VOTE, author="carol") == 0
        # The originals are still current: re-importing them appends nothing.
        assert append_labels(s, REF, original, source="import") == 0
        assert latest_label_values(s, REF, ids.values()) == original
