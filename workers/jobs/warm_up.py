"""The ``warm_up`` job: a benchmark's first views computed and kept, unless they are.

Each step reads in a short transaction and keeps what it read in a short write of its own, so
the job never holds the database while it reads a million rows, and a step already kept for
the current evidence version is skipped (a second warm-up keeps nothing again).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.services.disagreements.disagreement_query import DisagreementQuery
from app.services.disagreements.disagreement_results import ListRequest, RankedList, save_ranked
from app.services.disagreements.disagreement_view import disagreement_view, opening_query
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.labels import default_label_set
from app.services.jobs.warm_up import WarmUpParams, current_facets
from app.services.metrics.metric_results import compute_unless_stored, save_result
from app.services.metrics.svg_plots import metrics_figures
from app.services.table.facets import keep_facets
from app.sql.kept_arrays import keep_arrays, kept_arrays
from app.tables import Benchmark
from workers.runner import JobContext, handles


@handles(WarmUpParams)
def run_warm_up(ctx: JobContext) -> dict[str, Any]:
    """Handler of ``warm_up`` jobs: facets, kept arrays, headline metrics, opening list."""
    params = WarmUpParams.from_dict(ctx.params)
    facets = ctx.read(params.facets_to_keep)
    if facets is not None:
        ctx.commit(lambda session: keep_facets(session, *facets))
    reads = ctx.read(params.kept_reads)
    kept = 0
    for done, (name, read) in enumerate(reads):

        def arrays(session: Session, read: Any = read, name: str = name) -> Any:
            bench = get_benchmark(session, params.benchmark)
            if kept_arrays(session, bench, name) is not None:
                return None
            return bench, read(session, bench)

        found = ctx.read(arrays)
        if found is not None:
            ctx.commit(
                lambda s, f=found, n=name: keep_arrays(s, f[0], n, f[1]),
                done=done + 1,
                total=len(reads),
            )
            kept += 1
        else:
            ctx.progress(done + 1, len(reads))
    query = ctx.read(params.headline)
    result = ctx.read(
        lambda s: compute_unless_stored(s, query, draw=metrics_figures, progress=ctx.progress)
    )
    if result is not None:
        ctx.commit(lambda session: save_result(session, result))
    return {
        "benchmark": params.benchmark,
        "label": query.label,
        "computed": result is not None,
        "kept_arrays": kept,
        "opening_list": ctx.read(lambda s: _opening_list(s, params.benchmark, ctx)),
    }


def _opening_list(session: Session, name: str, ctx: JobContext) -> int | None:
    """Rank and keep the disagreements page's opening list; its length, None without one."""
    bench = get_benchmark(session, name)
    facets = current_facets(session, bench)
    query = opening_query(bench, DisagreementQuery())
    query = query.with_label(default_label_set([s.name for s in facets.label_sets], query.label))

    def save(_: Session, b: Benchmark, request: ListRequest, ranked: RankedList, s: float) -> None:
        ctx.commit(lambda w: save_ranked(w, b, request, ranked, s))

    view = disagreement_view(session, facets, query, save=save, page=(0, 0))
    return None if view.result is None else view.result.listed
