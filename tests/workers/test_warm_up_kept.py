"""What the ``warm_up`` job keeps (app/sql/kept_arrays.py) is what a cold read gives, and is read.

Both dialects. The kept thresholds are lowered so that the small seeded benchmark counts as big.
After the warm-up, with every process cache cleared (as after a restart), label columns,
detector scores and sorted table pages equal the row reads made before it; a kept row altered
by hand shows through (so the readers do read the store), and a write that bumps the evidence
version makes them read the rows again. Imports queue the warm-up of a big benchmark, once.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import Engine, func, select, update
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from app.cli import cli
from app.db import transaction
from app.ingest.mmlu_redux import import_mmlu_redux
from app.services.disagreements.disagreement_query import DisagreementQuery
from app.services.disagreements.disagreement_results import ListRequest, stored_ranked
from app.services.disagreements.disagreement_view import opening_query
from app.services.evidence.benchmarks import bump_data_version, get_benchmark
from app.services.evidence.labelled_items import (
    detector_scores,
    get_detector,
    label_columns_name,
    load_labelled,
)
from app.services.evidence.labels import append_label
from app.services.jobs import warm_up
from app.services.jobs.kind import enqueue
from app.services.jobs.metrics_view import MetricsView, Way, metrics_view
from app.services.jobs.rank_errors import RankErrorsParams
from app.services.jobs.warm_up import WarmUpParams
from app.services.metrics.metrics_query import MetricsQuery
from app.services.table import table_order
from app.settings import Settings
from app.sql.cache import VersionedCache
from app.sql.kept_arrays import keep_arrays, kept_arrays, texts
from app.tables import Instance, Job, KeptArrays
from tests.conftest import DATA
from tests.support.job_support import run_queue, store_on
from tests.table.test_instance_sort import BENCH, RM, _seed
from tests.table.test_table_order import FILTERS, _pages

SORT = f"-score:{RM}"
MMLU = DATA / "mmlu-redux"


@pytest.fixture
def big(factory: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch) -> None:
    _seed(factory)
    monkeypatch.setattr(table_order, "KEEP_ORDER_FROM", 1)
    monkeypatch.setattr(warm_up, "KEEP_ORDER_FROM", 1)
    table_order.ORDER_CACHE.clear()


def _labelled(factory: sessionmaker[Session]) -> tuple[list[int], dict[str, str], list[int]]:
    with factory() as s:
        items = load_labelled(s, BENCH, "reference")
        values = dict(zip(items.external_ids, items.values, strict=True))
        return items.instance_ids.tolist(), values, items.y.tolist()


def _scores(factory: sessionmaker[Session]) -> np.ndarray:
    with factory() as s:
        items = load_labelled(s, BENCH, "reference")
        return detector_scores(s, get_detector(s, RM), items)


def _no_sort(*_: object) -> None:
    raise AssertionError("the order was read from the rows")


def test_kept_columns_scores_and_orders_equal_the_rows_and_are_read_after_a_restart(
    big: None,
    settings: Settings,
    engine: Engine,
    factory: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    labelled, scores = _labelled(factory), _scores(factory)
    pages = {flt: _pages(factory, flt, SORT, None) for flt in FILTERS}
    assert len(labelled[0]) == 40 and np.isnan(scores).sum() == 8
    store = store_on(settings, engine)
    with transaction(factory) as s:
        enqueue(s, warm_up.WarmUpParams(BENCH, resamples=20))
    assert run_queue(store) == 1
    with factory() as s:
        job = s.scalar(select(Job))
        assert job is not None and job.status == "done", job.error
        # One label set, one scored detector (the judge has judgments, not scores), one order.
        assert job.result["kept_arrays"] == 3
        assert s.scalar(select(func.count()).select_from(KeptArrays)) == 3
    table_order.ORDER_CACHE.clear()  # a restart: nothing in this process's memory
    assert _labelled(factory) == labelled
    np.testing.assert_array_equal(_scores(factory), scores)
    # The unfiltered order comes from the store: the database is not asked to sort.
    with monkeypatch.context() as patched:
        patched.setattr(table_order, "_read_order", _no_sort)
        assert _pages(factory, FILTERS[0], SORT, VersionedCache()) == pages[FILTERS[0]]
    assert _pages(factory, FILTERS[1], SORT, VersionedCache()) == pages[FILTERS[1]]

    # The readers read the store: a kept value altered by hand shows through.
    with transaction(factory) as s:
        bench = get_benchmark(s, BENCH)
        name = label_columns_name("reference")
        row = s.scalar(select(KeptArrays).where(KeptArrays.name == name))
        assert row is not None
        arrays = kept_arrays(s, bench, name)
        assert arrays is not None
        assert sorted(texts(arrays["values.vocabulary"])) == ["A", "B"]
        altered = texts(arrays["external_ids"])[0]
        arrays["values.codes"][0] = 1 - arrays["values.codes"][0]
        s.delete(row)
        s.flush()
        keep_arrays(s, bench, name, arrays)
    assert _labelled(factory)[1][altered] != labelled[1][altered]
    # A write to the evidence bumps its version: the kept columns are no longer read.
    with transaction(factory) as s:
        bench = get_benchmark(s, BENCH)
        unlabelled = s.scalar(select(Instance.id).where(Instance.external_id == "x:3"))
        assert unlabelled is not None and "x:3" not in labelled[1]
        append_label(s, unlabelled, "reference", "A", source="import")
        bump_data_version(s, bench)
    after = _labelled(factory)
    assert after[1] == {**labelled[1], "x:3": "A"}
    # A second warm-up keeps this version, and the older rows go.
    with transaction(factory) as s:
        enqueue(s, warm_up.WarmUpParams(BENCH, resamples=20))
    run_queue(store)
    with factory() as s:
        versions = set(s.scalars(select(KeptArrays.evidence_version)))
        assert versions == {get_benchmark(s, BENCH).evidence_version}
    assert _labelled(factory) == after


def test_an_import_queues_the_warm_up_of_a_big_benchmark_once(
    settings: Settings,
    factory: sessionmaker[Session],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("APPELLATE_DATABASE_URL", settings.resolved_database_url)
    monkeypatch.setenv("APPELLATE_DATA_DIR", str(settings.data_dir))
    path = tmp_path / "items.jsonl"
    rows = [
        {"key": f"k{i}", "q": f"q{i}", "a": "x", "b": "y", "gold": "AB"[i % 2]} for i in range(6)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    args = ["import", "table", str(path), "--kind", "pairwise", "--map", "prompt=q"]
    args += ["--map", "response_a=a", "--map", "response_b=b", "--label", "reference=gold"]
    args += ["--id", "key", "--benchmark", "mine"]

    def jobs() -> list[dict[str, object]]:
        with factory() as s:
            return list(s.scalars(select(Job.params).where(Job.kind == "warm_up")))

    small = CliRunner().invoke(cli, args)
    assert small.exit_code == 0, small.output
    assert "queued" not in small.stdout and jobs() == []  # 6 items: nothing to prepare
    monkeypatch.setattr(warm_up, "WARM_UP_FROM", 6)
    first = CliRunner().invoke(cli, args)
    assert first.exit_code == 0, first.output
    assert "mine: job" in first.stdout and "queued to prepare its first views" in first.stdout
    assert jobs() == [{"benchmark": "mine", "resamples": warm_up.WarmUpParams.resamples}]
    # Imported again while that one still waits: it will read this import too.
    again = CliRunner().invoke(cli, args)
    assert again.exit_code == 0 and "queued" not in again.stdout and len(jobs()) == 1
    # Once it has started, the next import queues another (the first may have read before it).
    with transaction(factory) as s:
        s.execute(update(Job).values(status="running"))
    later = CliRunner().invoke(cli, args)
    assert "queued to prepare" in later.stdout and len(jobs()) == 2


def test_the_warm_up_ranks_and_keeps_the_opening_list_of_a_benchmark_with_a_default_ranker(
    settings: Settings, engine: Engine, factory: sessionmaker[Session]
) -> None:
    store = store_on(settings, engine)
    with transaction(factory) as s:
        import_mmlu_redux(s, [MMLU / "astronomy.csv"], "astro")
        enqueue(s, RankErrorsParams("astro", ["consensus"]))
    assert run_queue(store) == 1
    with transaction(factory) as s:
        bench = get_benchmark(s, "astro")
        opening = opening_query(bench, DisagreementQuery()).with_label("reference")
        spec = opening.spec
        request = ListRequest.of(
            spec, opening.detectors, "reference", None, spec.settle(opening.detectors, {})
        )
        assert opening.detectors == ("ranker:consensus",)
        assert stored_ranked(s, bench, request) is None
        enqueue(s, WarmUpParams("astro", resamples=20))
    assert run_queue(store) == 1
    with factory() as s:
        job = s.scalar(select(Job).where(Job.kind == WarmUpParams.kind))
        assert job is not None and job.status == "done", job.error
        kept = stored_ranked(s, get_benchmark(s, "astro"), request)
        assert kept is not None and len(kept) == job.result["opening_list"] > 0


def test_a_metrics_visit_during_the_warm_up_waits_for_it_instead_of_queueing_another(
    big: None, settings: Settings, engine: Engine, factory: sessionmaker[Session]
) -> None:
    with transaction(factory) as s:
        warm_id = enqueue(s, warm_up.WarmUpParams(BENCH)).id

    def visit() -> MetricsView:
        # What the metrics page asks for first; limit 0: a job computes anything not stored.
        return metrics_view(
            factory, factory, BENCH, lambda f: MetricsQuery(BENCH, "reference"), limit=0
        )

    pending = visit()
    assert pending.way is Way.JOB and pending.job is not None and pending.job.id == warm_id
    with factory() as s:
        assert s.scalar(select(func.count()).select_from(Job)) == 1, "no compute_metrics job"
    assert run_queue(store_on(settings, engine)) == 1
    done = visit()
    assert done.way is Way.STORED and done.result is not None
    # A request the warm-up does not compute still queues its own job.
    other = metrics_view(
        factory, factory, BENCH, lambda f: MetricsQuery(BENCH, "reference", resamples=7), limit=0
    )
    assert other.job is not None and other.job.kind == "compute_metrics"
