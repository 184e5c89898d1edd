"""Judge job bookkeeping in the store: which (pair, order) units remain, and idempotent writes.

A unit is one instance in one order. Units with a judgment row are done, so a resumed job
re-plans from the table and never writes a judgment twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.benchmarks import bump_data_version
from app.services.evidence.flips import recompute_flips
from app.services.evidence.model_runs import run_items
from app.services.evidence.scores import benchmark_scores
from app.services.jobs.judge import JudgeParams
from app.services.jobs.judge_protocol import identity
from app.services.jobs.judge_sampling import sample_pairs
from app.tables import Benchmark, Instance, Judgment, Order


@dataclass(frozen=True)
class Unit:
    """One pair to judge in one order, with the texts the prompt needs."""

    instance_id: int
    order: str
    prompt: str
    response_a: str
    response_b: str


@dataclass(frozen=True)
class JudgePlan:
    """The units still to judge, how many there are in all (``units``), the judge's id."""

    benchmark_id: int
    detector_id: int
    pending: list[Unit]
    total: int
    units: list[Unit] = field(default_factory=list)


@dataclass(frozen=True)
class UnitResult:
    """What a judge produced for one unit (slot-level, before mapping to identities)."""

    unit: Unit
    raw_output: str
    slot: str | None
    confidence: float | None
    error: str | None
    label_logits: dict[str, float] | None
    prompt_tokens: int | None
    output_tokens: int | None
    activation_ref: str | None
    details: dict[str, Any]


def plan_units(
    session: Session, params: JudgeParams, detector_details: dict[str, Any]
) -> JudgePlan:
    """The units of a judge job and which are not judged yet (creates the judge detector).

    A seeded sample of ``limit`` pairs (every pair without a limit) is judged in ``orders``;
    the first ``repeat_subset`` of them also get an ``AB-repeat`` judgment (the determinism
    control).

    Raises
    ------
    InvalidInput
        If a pair lacks its prompt or responses.

    """

    def choose(s: Session, benchmark_id: int, detector_id: int) -> list[int]:
        assert params.limit is not None  # run_items chooses only with a limit
        return sample_pairs(s, benchmark_id, detector_id, params.limit, params.seed)

    run = run_items(session, params, detector_details, choose)
    units: list[Unit] = []
    for n, (instance_id, external_id, payload) in enumerate(run.rows):
        orders = list(params.orders)
        if n < params.repeat_subset:
            orders.append(Order.AB_REPEAT.value)
        units.extend(pair_units(instance_id, external_id, payload, orders))
    return _plan(session, run.benchmark_id, run.detector_id, units)


def pair_units(
    instance_id: int, external_id: str, payload: dict[str, Any], orders: Sequence[str]
) -> list[Unit]:
    """The units of one pair in ``orders``.

    Raises
    ------
    InvalidInput
        If the pair lacks its prompt or responses.

    """
    texts = [payload.get(k) for k in ("prompt", "response_a", "response_b")]
    if not all(isinstance(t, str) for t in texts):
        raise InvalidInput(
            f"pair {external_id!r} lacks a prompt, response_a or response_b text",
            field="payload",
        )
    return [Unit(instance_id, order, *texts) for order in orders]  # type: ignore[arg-type]


def _plan(session: Session, benchmark_id: int, detector_id: int, units: list[Unit]) -> JudgePlan:
    """The plan of ``units``: those without a judgment of the detector are pending."""
    done = set(
        session.execute(
            select(Judgment.instance_id, Judgment.order).where(
                Judgment.detector_id == detector_id,
                Judgment.instance_id.in_([u.instance_id for u in units]),
            )
        )
    )
    pending = [u for u in units if (u.instance_id, u.order) not in done]
    return JudgePlan(benchmark_id, detector_id, pending, len(units), units)


def selected_plan(
    session: Session, benchmark_id: int, detector_id: int, chosen: Sequence[tuple[int, str]]
) -> JudgePlan:
    """The plan of judging exactly the ``(instance id, order)`` units in ``chosen``."""
    ids = [i for i, _ in chosen]
    rows = {
        i: (e, p)
        for i, e, p in session.execute(
            select(Instance.id, Instance.external_id, Instance.payload).where(Instance.id.in_(ids))
        )
    }
    units = [u for i, order in chosen for u in pair_units(i, *rows[i], [order])]
    return _plan(session, benchmark_id, detector_id, units)


def write_results(
    session: Session, plan: JudgePlan, results: Sequence[UnitResult], *, mode: str
) -> int:
    """Insert the judgments of one batch, skipping units judged meanwhile; returns rows added.

    Choices and verdict logits are stored in identity terms (``verdict_logits["A"]`` is the
    logit of the label that named response A in that order); the slot is kept in the details.
    """
    ids = [r.unit.instance_id for r in results]
    existing = set(
        session.execute(
            select(Judgment.instance_id, Judgment.order).where(
                Judgment.detector_id == plan.detector_id, Judgment.instance_id.in_(ids)
            )
        )
    )
    added = 0
    for r in results:
        key = (r.unit.instance_id, r.unit.order)
        if key in existing:
            continue
        existing.add(key)
        logits = None
        if r.label_logits is not None:
            logits = {identity(slot, r.unit.order): v for slot, v in r.label_logits.items()}
        choice = "invalid" if r.error or r.slot is None else identity(r.slot, r.unit.order)
        session.add(
            Judgment(
                instance_id=r.unit.instance_id,
                detector_id=plan.detector_id,
                order=r.unit.order,
                raw_output=r.raw_output,
                choice=choice,
                confidence=r.confidence,
                verdict_logits=logits,
                mode=mode,
                prompt_tokens=r.prompt_tokens,
                output_tokens=r.output_tokens,
                activation_ref=r.activation_ref,
                details={**r.details, "slot": r.slot, "parse_error": r.error},
            )
        )
        added += 1
    session.flush()
    if added:
        _bump(session, plan.benchmark_id)
    return added


def _bump(session: Session, benchmark_id: int) -> None:
    bump_data_version(session, session.get_one(Benchmark, benchmark_id))


def _scored_pairs(session: Session, plan: JudgePlan) -> int:
    """Pairs of the benchmark that now have a score of the judge."""
    scored = benchmark_scores(plan.detector_id, plan.benchmark_id).subquery()
    return session.scalar(select(func.count()).select_from(scored)) or 0


def finish_judging(session: Session, plan: JudgePlan) -> dict[str, Any]:
    """Derive the judge's flip labels, scores and the repeat control; the job's result summary."""
    flips = recompute_flips(session, plan.benchmark_id, [plan.detector_id])
    if flips.changed:
        _bump(session, plan.benchmark_id)
    rows = session.execute(
        select(Judgment.instance_id, Judgment.order, Judgment.choice)
        .join(Instance, Instance.id == Judgment.instance_id)
        .where(Judgment.detector_id == plan.detector_id, Instance.benchmark_id == plan.benchmark_id)
    )
    by_order: dict[str, dict[int, str]] = {}
    for instance_id, order, choice in rows:
        by_order.setdefault(order, {})[instance_id] = choice
    ab, repeat = by_order.get(Order.AB.value, {}), by_order.get(Order.AB_REPEAT.value, {})
    compared = [i for i in repeat if i in ab]
    counts = {order: len(v) for order, v in by_order.items()}
    invalid = {o: sum(c == "invalid" for c in v.values()) for o, v in by_order.items()}
    return {
        "judgments": sum(counts.values()),
        "by_order": counts,
        "invalid_by_order": invalid,
        "retained_pairs": flips.retained,
        "flips": flips.flips,
        "scored_pairs": _scored_pairs(session, plan),
        "repeat_control": {
            "compared": len(compared),
            "changed": sum(ab[i] != repeat[i] for i in compared),
        },
    }
