"""The ``critic`` job: plan the items left, ask the critic by length, write the scores per batch.

Per batch, in the transaction that holds the job, the valid verdicts' scores are written
(idempotent), so a job killed anywhere resumes from the score table. Outputs without a valid
verdict are counted, never scored; the result gives the retention (scored / labelled items).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from app.services.jobs.critic import CriticParams
from app.services.jobs.critic_results import (
    CriticTally,
    CriticVerdict,
    finish_critic,
    plan_critic,
    write_verdicts,
)
from workers.engines.critic import CriticEngine, LocalCritic, RemoteCritic
from workers.engines.judge import length_buckets
from workers.jobs.judge import load_registered
from workers.runner import JobContext, handles


def make_critic(ctx: JobContext, params: CriticParams) -> CriticEngine:
    """The backend the job asks for."""
    if params.backend == "remote":
        return RemoteCritic.from_params(params)
    loaded, _row = load_registered(ctx, params.model)
    return LocalCritic(loaded, params)


@handles(CriticParams)
def run_critic(ctx: JobContext) -> dict[str, Any]:
    """Handler of ``critic`` jobs: see the module docstring."""
    params = CriticParams.from_dict(ctx.params)
    engine = make_critic(ctx, params)
    plan = ctx.commit(lambda s: plan_critic(s, params, engine.describe()))
    total = len(plan.item_ids)
    done = total - len(plan.pending)
    ctx.progress(done, total)
    tally = CriticTally()
    for batch in length_buckets(engine.lengths(plan.pending), params.batch_size):
        ctx.check()
        items = [plan.pending[i] for i in batch]
        verdicts = engine.critique(items)
        tally.add(items, verdicts)
        done += len(items)

        def write(session: Session, verdicts: list[CriticVerdict] = verdicts) -> None:
            write_verdicts(session, plan, str(params.mode), verdicts)

        ctx.commit(write, done=done, total=total)
    result: dict[str, Any] = {"detector": params.detector, "mode": params.mode}
    result.update(ctx.commit(lambda s: finish_critic(s, plan, tally)))
    return result
