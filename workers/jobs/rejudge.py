"""The ``rejudge`` job: rank the one-order pairs, judge the top ``budget`` in their other order.

A frozen flip probe ranker is applied first to the judge's AB capture on the benchmark (its
scores are replaced there); the choice is then read from the store, and the chosen units are
judged by the judge job's own loop, each judgment marked with this job's id so that a resumed
job chooses the same pairs (:mod:`app.services.jobs.rejudge_plan`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.labelled_items import get_detector
from app.services.jobs.apply_probe import ApplyParams
from app.services.jobs.judge import JudgeParams
from app.services.jobs.judge_results import JudgePlan, selected_plan
from app.services.jobs.rejudge import RejudgeParams
from app.services.jobs.rejudge_plan import (
    RANDOM,
    REJUDGE_KEY,
    Selection,
    choose_pairs,
    flips_among,
    judge_settings,
)
from workers.jobs.judge import judge_plan, make_engine
from workers.jobs.probes import apply_frozen
from workers.runner import JobContext, handles


def _is_frozen(session: Session, name: str) -> bool:
    return name != RANDOM and bool((get_detector(session, name).details or {}).get("artifact"))


def _judge_params(session: Session, p: RejudgeParams, orders: list[str]) -> JudgeParams:
    """The judge's own settings, judging ``orders`` with no capture."""
    s = judge_settings(session, p.judge, p.model, p.base_url)
    return JudgeParams.from_dict(
        {
            "benchmark": p.benchmark,
            "model": s["model"],
            "judge": p.judge,
            "backend": s["backend"],
            "base_url": s["base_url"],
            "orders": orders,
            "mode": s["mode"] or "generate",
            "system": s["system"],
            "template": s["template"],
            "capture": False,
            "batch_size": p.batch_size,
        }
    )


@handles(RejudgeParams)
def run_rejudge(ctx: JobContext) -> dict[str, Any]:
    """Handler of ``rejudge`` jobs: see the module docstring."""
    p = RejudgeParams.from_dict(ctx.params)
    job_id = ctx.claim.job_id
    ranker = ctx.read(p.resolved_ranker)
    applied = None
    if ctx.read(lambda s: _is_frozen(s, ranker)):
        applied = apply_frozen(ctx, ApplyParams(probe=ranker, benchmark=p.benchmark))

    def choose(session: Session) -> tuple[Selection, int, int, str | None]:
        bench = get_benchmark(session, p.benchmark)
        judge = get_detector(session, p.judge)
        found = choose_pairs(
            session, bench.id, judge.id, ranker, p.budget, seed=p.seed, job_id=job_id
        )
        expected = judge_settings(session, p.judge, p.model, p.base_url)["fingerprint"]
        return found, bench.id, judge.id, expected

    selection, benchmark_id, judge_id, fingerprint = ctx.read(choose)
    orders = sorted({order for _, order in selection.chosen}) or ["BA"]
    params = ctx.read(lambda s: _judge_params(s, p, orders))
    engine = make_engine(ctx, params)
    described = engine.describe().get("fingerprint")
    if fingerprint and described and described != fingerprint:
        # Another model's verdict in the other order says nothing about this judge's flips.
        raise InvalidInput(
            f"model {params.model!r} has other weights than the ones judge {p.judge!r} used",
            field="model",
        )
    plan: JudgePlan = ctx.commit(
        lambda s: selected_plan(s, benchmark_id, judge_id, selection.chosen)
    )
    result = judge_plan(ctx, params, engine, plan, details={REJUDGE_KEY: job_id})
    names = {i: e for i, e, _ in selection.ranked}
    chosen_ids = [i for i, _ in selection.chosen]
    found = ctx.read(lambda s: flips_among(s, judge_id, chosen_ids))
    return {
        **result,
        "ranker": ranker,
        "budget": p.budget,
        "remaining": selection.remaining,
        "unscored": selection.unscored,
        "invalid_only": selection.invalid,
        "chosen": [names[i] for i, _ in selection.chosen],
        "chosen_orders": orders,
        "flips_found": found,
        **({"applied": applied} if applied else {}),
    }
