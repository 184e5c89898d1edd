"""The savings page: flips recovered against extra judge calls, per ranker, with intervals.

``/benchmarks/{name}/savings?judge=J`` shows
:func:`app.services.metrics.judge_savings.judge_savings` for a judge judged in both orders:
the curves (inline SVG), the k that recovers 50% / 80% of the flips, the areas and their
paired differences, and a link to the form that queues a ``rejudge`` job.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query, Request
from starlette.responses import HTMLResponse

from app.db import transaction
from app.errors import InvalidInput, NotFound
from app.services.evidence.benchmarks import get_benchmark
from app.services.metrics.judge_savings import judge_savings, savings_plot
from app.web.deps import StoreDep
from app.web.error_docs import PAGE_RESAMPLES
from app.web.routers import page_router
from app.web.templating import render

router = page_router()


@router.get("/benchmarks/{name}/savings", response_class=HTMLResponse)
def savings_page(
    request: Request,
    name: str,
    store: StoreDep,
    judge: Annotated[str, Query(max_length=200)] = "",
) -> HTMLResponse:
    """The savings curves of re-judging ``judge``'s pairs on benchmark ``name``."""
    report: dict[str, Any] | None = None
    reason = None
    with transaction(store.factory) as session:
        bench = get_benchmark(session, name)
        if not judge:
            reason = "Name a judge (?judge=NAME) that judged this benchmark in both orders."
        else:
            try:
                report = judge_savings(session, name, judge, resamples=PAGE_RESAMPLES)
            except (InvalidInput, NotFound) as exc:
                # A judge without flips or without a fitted probe: say why, as the CLI does.
                reason = exc.reason if isinstance(exc, InvalidInput) else str(exc)
    context = {
        "bench": bench,
        "judge": judge,
        "report": report,
        "reason": reason,
        "plot": savings_plot(report) if report else None,
    }
    return render(request, "savings.html", context)
