"""The judges page: the position-bias panel of a pairwise benchmark's judges, side by side.

A GET form (judges, slice field, resamples, seed) whose every choice is in the URL; the numbers
are :func:`app.services.metrics.bias_panel.judge_panel`'s, the dict ``appellate judges --json``
prints.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Request
from starlette.responses import HTMLResponse

from app.db import transaction
from app.errors import InvalidInput
from app.services.evidence.benchmarks import get_benchmark
from app.services.metrics.bias_panel import FIGURES, judge_panel
from app.services.table.facets import benchmark_facets
from app.tables import BenchmarkKind
from app.web.benchmark_params import non_blank
from app.web.deps import ReadCache, StoreDep
from app.web.error_docs import MAX_RESAMPLES, PAGE_RESAMPLES
from app.web.filters import Blank
from app.web.params import DbCount
from app.web.routers import page_router
from app.web.templating import render

router = page_router()


@router.get("/benchmarks/{name}/judges", response_class=HTMLResponse)
def judges_page(
    request: Request,
    name: str,
    store: StoreDep,
    cache: ReadCache,
    judge: Annotated[list[str] | None, Query(description="Judges to compare.")] = None,
    slice: Annotated[str | None, Blank, Query(description="Field stratifying the folds.")] = None,
    resamples: Annotated[int, Query(ge=1, le=MAX_RESAMPLES)] = PAGE_RESAMPLES,
    seed: Annotated[DbCount, Query()] = 0,
) -> HTMLResponse:
    """The panel of the chosen judges (every two-order judge when none is chosen)."""
    chosen = non_blank(judge)
    with transaction(store.factory) as session:
        bench = get_benchmark(session, name)
        if bench.kind != BenchmarkKind.pairwise:
            raise InvalidInput(f"{name!r} holds no pairs: it has no judges", field="name")
        facets = benchmark_facets(session, bench, cache)
        two_order = [j.name for j in facets.judges if j.flip_label]
        panel: dict[str, Any] | None = None
        if two_order:
            panel = judge_panel(
                session, name, chosen, resamples=resamples, seed=seed, slice_field=slice
            )
    context = {
        "name": name,
        "facets": facets,
        "judges": two_order,
        "chosen": chosen,
        "slice_field": slice,
        "resamples": resamples,
        "seed": seed,
        "panel": panel,
        "figures": FIGURES,
    }
    return render(request, "judges.html", context)
