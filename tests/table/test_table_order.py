"""Kept table orders (app/services/table/table_order.py) equal the database's own sort.

On both dialects.

The kept path is switched on for the small seeded benchmark by lowering ``KEEP_ORDER_FROM``;
every page and every instance's neighbours must then equal what the direct SQL path gives.
A review event keeps the order; a new score reads it again.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.evidence.benchmarks import bump_data_version, get_benchmark
from app.services.evidence.labels import append_label
from app.services.table import table_order
from app.services.table.browse import benchmark_view
from app.services.table.instance_filter import InstanceFilter, LabelCondition
from app.services.table.instance_sort import TableSort
from app.services.table.instances import instance_detail
from app.sql.cache import VersionedCache
from app.tables import Detector, Instance, Score
from tests.table.test_instance_sort import BENCH, JUDGE, RM, N, _seed

SORTS = [f"-score:{RM}", f"score:{RM}", "-label:reference", f"-confidence:{JUDGE}", "group", ""]
FILTERS = [InstanceFilter(), InstanceFilter(labels=(LabelCondition(name="reference", value="A"),))]
PAGE = 20


@pytest.fixture
def seeded(factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch) -> None:
    _seed(factory)
    monkeypatch.setattr(table_order, "KEEP_ORDER_FROM", 1)
    table_order.ORDER_CACHE.clear()


def _pages(
    factory: sessionmaker[Session], flt: InstanceFilter, sort: str, cache: VersionedCache | None
) -> list[str]:
    got: list[str] = []
    with factory() as session:
        for page in range(1, N // PAGE + 2):
            view = benchmark_view(
                session, BENCH, flt, page=page, page_size=PAGE, cache=cache,
                sort=TableSort.parse(sort),
            )  # fmt: skip
            got += [row["external_id"] for row in view.table.items]
    return got


def _neighbours(
    factory: sessionmaker[Session],
    flt: InstanceFilter,
    sort: str,
    ids: list[str],
    cache: VersionedCache | None,
) -> list[tuple[str | None, str | None]]:
    with factory() as session:
        found = []
        for external_id in ids:
            detail = instance_detail(
                session, BENCH, external_id, flt, cache=cache, sort=TableSort.parse(sort)
            )
            found.append((detail.neighbours.previous, detail.neighbours.next))
        return found


@pytest.mark.parametrize("sort", SORTS)
@pytest.mark.parametrize("flt", FILTERS, ids=["all", "label"])
def test_kept_pages_and_neighbours_equal_the_database_sort(
    seeded: None, factory: sessionmaker[Session], sort: str, flt: InstanceFilter
) -> None:
    direct = _pages(factory, flt, sort, None)
    assert len(direct) == (N if flt.is_empty else len(set(direct))) and direct
    cache = VersionedCache()
    misses = table_order.ORDER_CACHE.misses
    assert _pages(factory, flt, sort, cache) == direct
    kept = 0 if sort == "" else 1  # the default order seeks its index instead
    assert table_order.ORDER_CACHE.misses - misses == kept
    # Neighbours of every row, including the first and the last.
    expected = [
        (direct[i - 1] if i else None, direct[i + 1] if i + 1 < len(direct) else None)
        for i in range(len(direct))
    ]
    assert _neighbours(factory, flt, sort, direct, None) == expected
    assert _neighbours(factory, flt, sort, direct, cache) == expected
    assert table_order.ORDER_CACHE.misses - misses == kept, "neighbours read the kept order"


def test_a_vote_keeps_the_order_a_new_score_reads_it_again(
    seeded: None, factory: sessionmaker[Session]
) -> None:
    sort = f"-score:{RM}"
    cache = VersionedCache()
    before = _pages(factory, InstanceFilter(), sort, cache)
    misses = table_order.ORDER_CACHE.misses
    with transaction(factory) as session:
        bench = get_benchmark(session, BENCH)
        first = session.scalars(select(Instance.id).where(Instance.external_id == before[0])).one()
        append_label(session, first, "reference", "B", source="vote", author="a")
        bump_data_version(session, bench, review=True)
    assert _pages(factory, InstanceFilter(), sort, cache) == before
    assert table_order.ORDER_CACHE.misses == misses, "a review event keeps the kept order"
    # The top item's score falls below every other: after the bump it is read again.
    with transaction(factory) as session:
        bench = get_benchmark(session, BENCH)
        rm = session.scalars(select(Detector.id).where(Detector.name == RM)).one()
        session.execute(
            update(Score)
            .where(Score.instance_id == first, Score.detector_id == rm)
            .values(score=-1.0)
        )
        bump_data_version(session, bench)
    after = _pages(factory, InstanceFilter(), sort, cache)
    assert table_order.ORDER_CACHE.misses == misses + 1
    assert after == _pages(factory, InstanceFilter(), sort, None)
    assert after[0] != before[0] and sorted(after) == sorted(before)
