"""Fixing one label without a queue: an adjudication appended to the item's history.

On both databases: the event carries its author and reason, resolves the label, shows in the
changelog; refusals (role, label set, value, reason, stale version) write nothing.
"""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import InvalidInput
from app.services.accounts.users import Principal, create_user
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.resolution import changelog, resolved_labels
from app.services.review import queues
from app.services.review.queues import NotAssigned
from app.services.table import facets
from app.settings import Settings
from app.tables import Instance, LabelEvent, Role
from app.web.urls import instance_url
from tests.support import factories as f
from tests.support.auth_support import api_client


def _principal(factory: sessionmaker[Session], name: str, role: Role) -> Principal:
    with transaction(factory) as s:
        user = create_user(s, name, role.value)
        return Principal(user.id, user.name, role, token_id=0)


def _item(factory: sessionmaker[Session], external_id: str) -> tuple[int, int]:
    with factory() as s:
        iid = s.scalar(select(Instance.id).where(Instance.external_id == external_id))
        assert iid is not None
        return iid, queues.label_version(s, iid, "reference")


def _events(factory: sessionmaker[Session]) -> int:
    with factory() as s:
        return int(s.scalar(select(func.count()).select_from(LabelEvent)) or 0)


def test_a_reviewer_relabels_and_the_history_keeps_both(factory: sessionmaker[Session]) -> None:
    f.seed_benchmarks(factory)
    rita = _principal(factory, "rita", Role.reviewer)
    iid, version = _item(factory, "pair/002")
    with transaction(factory) as s:
        event = queues.relabel(
            s, iid, "reference", rita, value="A", seen_version=version, reason="B is wrong"
        )
        assert (event.source, event.author, event.reason) == ("adjudication", "rita", "B is wrong")
    with factory() as s:
        bench = get_benchmark(s, f.PAIRWISE)
        resolution = resolved_labels(s, bench.id, "reference")[iid]
        rows = [r for r in changelog(s, bench.id, ["reference"]) if r.external_id == "pair/002"]
    assert (resolution.original, resolution.resolved, resolution.rule) == ("B", "A", "adjudication")
    assert [(r.original, r.resolved, r.reasons, r.authors) for r in rows] == [
        ("B", "A", ("B is wrong",), ("rita",))
    ]


@pytest.mark.parametrize(
    ("role", "label", "value", "reason", "stale", "error"),
    [
        (Role.annotator, "reference", "A", "why", False, NotAssigned),
        (Role.reviewer, "nope", "A", "why", False, InvalidInput),
        (Role.reviewer, "reference", "C", "why", False, InvalidInput),
        (Role.reviewer, "reference", "A", "  ", False, InvalidInput),
        (Role.reviewer, "reference", "A", "why", True, queues.StaleWrite),
    ],
)
def test_a_refused_relabel_writes_nothing(
    factory: sessionmaker[Session],
    role: Role,
    label: str,
    value: str,
    reason: str,
    stale: bool,
    error: type[Exception],
) -> None:
    f.seed_benchmarks(factory)
    who = _principal(factory, "someone", role)
    iid, version = _item(factory, "pair/002")
    before = _events(factory)
    with pytest.raises(error), transaction(factory) as s:
        queues.relabel(s, iid, label, who, value=value, seen_version=version - stale, reason=reason)
    assert _events(factory) == before


def test_the_instance_page_takes_relabel_choices_from_the_facets_it_read(
    settings: Settings, factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reviewer's instance page scans the benchmark for its facets once, not per label set.

    Each label set's choices once came from a fresh facet scan (2-7 s per page at a million
    items on PostgreSQL); the page now reads them from the facets of its own request memo.
    """
    f.seed_benchmarks(factory)
    scans: list[int] = []
    compute = facets._compute_facets
    monkeypatch.setattr(facets, "_compute_facets", lambda s, b: scans.append(b.id) or compute(s, b))
    with api_client(settings, role="reviewer") as client:
        for _ in range(2):
            page = client.get(instance_url(f.PAIRWISE, "pair/002"))
            assert page.status_code == 200 and 'id="relabel-form"' in page.text
    # One scan per benchmark (the start-up warm-up's, which the pages then share).
    assert scans and len(scans) == len(set(scans))
