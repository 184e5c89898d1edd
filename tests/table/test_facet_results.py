"""Facets kept in the store per evidence version: read back equal, read after a restart."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.ingest.judgebench import import_judgebench
from app.services.evidence.benchmarks import bump_data_version, get_benchmark
from app.services.table import facets as facets_module
from app.services.table.facets import benchmark_facets, facets_kept, keep_facets, stored_facets
from app.settings import Settings
from app.tables import FacetResult
from tests.ingest.test_helpers import O1_MINI, PAIRS_GPT4O, REWARD_OUTPUTS
from tests.support.auth_support import api_client
from tests.table.test_warm_up import _wait_for_warm_up


@pytest.fixture
def imported(factory: sessionmaker[Session]) -> None:
    with transaction(factory) as session:
        import_judgebench(session, [PAIRS_GPT4O], outputs=[O1_MINI, *REWARD_OUTPUTS])


def test_kept_facets_read_back_equal_to_computed_ones(
    imported: None, factory: sessionmaker[Session]
) -> None:
    with transaction(factory) as session:
        bench = get_benchmark(session, "judgebench")
        computed = benchmark_facets(session, bench)
        assert computed.judges and computed.scored_detectors  # ids to carry
        assert stored_facets(session, bench) is None and not facets_kept(session, bench)
        keep_facets(session, bench, computed)
        keep_facets(session, bench, computed)  # a second keeper changes nothing
    with factory() as session:
        bench = get_benchmark(session, "judgebench")
        assert stored_facets(session, bench) == computed
        assert [j.id for j in stored_facets(session, bench).judges] == [  # type: ignore[union-attr]
            j.id for j in computed.judges
        ]
        assert session.scalar(select(func.count()).select_from(FacetResult)) == 1


def test_a_review_event_keeps_them_new_evidence_drops_them(
    imported: None, factory: sessionmaker[Session]
) -> None:
    with transaction(factory) as session:
        bench = get_benchmark(session, "judgebench")
        keep_facets(session, bench, benchmark_facets(session, bench))
        bump_data_version(session, bench, review=True)
    with factory() as session:
        bench = get_benchmark(session, "judgebench")
        kept = stored_facets(session, bench)
        assert kept is not None and kept.summary.data_version == bench.data_version
    with transaction(factory) as session:
        bench = get_benchmark(session, "judgebench")
        bump_data_version(session, bench)
        assert stored_facets(session, bench) is None
        keep_facets(session, bench, benchmark_facets(session, bench))
    with factory() as session:
        rows = session.scalars(select(FacetResult.evidence_version)).all()
        assert rows == [get_benchmark(session, "judgebench").evidence_version]


def test_a_restarted_server_reads_them_instead_of_scanning(
    imported: None, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(facets_module, "KEEP_FACETS_FROM", 1)  # 350 pairs count as big here
    with api_client(settings) as client:
        _wait_for_warm_up()
        assert client.get("/benchmarks/judgebench").status_code == 200
    scans = 0
    compute = facets_module._compute_facets

    def counted(*args: object) -> object:
        nonlocal scans
        scans += 1
        return compute(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(facets_module, "_compute_facets", counted)
    with api_client(settings) as client:
        _wait_for_warm_up()
        page = client.get("/benchmarks/judgebench")
        assert page.status_code == 200 and "judgebench" in page.text
    assert scans == 0, "the warm-up and the first request read the kept facets"


def test_a_small_benchmark_is_not_kept(
    imported: None, settings: Settings, factory: sessionmaker[Session]
) -> None:
    # Scanned in milliseconds: a start-up writes nothing for it (no writer beside others).
    with api_client(settings) as client:
        _wait_for_warm_up()
        assert client.get("/benchmarks/judgebench").status_code == 200
    with factory() as session:
        assert session.scalar(select(func.count()).select_from(FacetResult)) == 0
