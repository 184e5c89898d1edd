"""The ``judge`` job: plan the (pair, order) units left, judge them by length, write per batch.

Per batch, in the transaction that holds the job, activations go to a new shard first and the
judgments second, each idempotent; a job killed anywhere resumes from the judgment table without
duplicating a row or a stored state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.attributes import attributes
from app.services.evidence.language_models import get_language_model
from app.services.jobs.judge import JudgeParams
from app.services.jobs.judge_context import audit_context
from app.services.jobs.judge_protocol import VERDICT_PREFIX
from app.services.jobs.judge_results import (
    JudgePlan,
    Unit,
    UnitResult,
    finish_judging,
    plan_units,
    write_results,
)
from app.tables import Judgment, LanguageModel, Order
from workers.engines.activations import FillingSet, ShardFiles, open_model_set
from workers.engines.capture import render_chat
from workers.engines.judge import (
    JudgeOutput,
    JudgeSettings,
    content_free_logits,
    judge_batch,
    judge_layers,
    length_buckets,
    verify_replay,
)
from workers.engines.models import LoadedModel, load_model
from workers.runner import JobContext, handles

POSITION_RULE = "before-verdict (AB order, captured during judging)"


class Engine(Protocol):
    """A judge backend: turns units into outputs (and, locally, replays them)."""

    layers: list[int] | None

    def describe(self) -> dict[str, Any]:
        """Details stored on the judge detector."""
        ...

    def lengths(self, units: Sequence[Unit]) -> list[int]:
        """A size per unit for length bucketing."""
        ...

    def judge(self, units: Sequence[Unit]) -> list[JudgeOutput]:
        """Judge one batch."""
        ...

    def verify(self, outputs: Sequence[JudgeOutput]) -> list[dict[str, Any]]:
        """Replay records for ``outputs`` (empty when the backend cannot replay)."""
        ...


@dataclass
class LocalEngine:
    """A transformers model on this worker's device."""

    loaded: LoadedModel
    params: JudgeParams
    model_row: dict[str, Any]
    layers: list[int] | None = None
    _prompts: dict[tuple[int, str], list[int]] = field(default_factory=dict)
    _priors: dict[str, dict[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.params.captures:
            self.layers = judge_layers(self.loaded.info.n_layers)
        self._template_kwargs = self.loaded.info.template_kwargs

    def describe(self) -> dict[str, Any]:
        """Details stored on the judge detector."""
        return {
            "backend": "local",
            "model": self.params.model,
            "fingerprint": self.loaded.info.fingerprint,
            "mode": self.params.mode,
            "template": self.params.template,
            "system": self.params.system,
        }

    def _ids(self, unit: Unit) -> list[int]:
        key = (unit.instance_id, unit.order)
        if key not in self._prompts:
            messages = self.params.prompt.messages(
                unit.prompt, unit.response_a, unit.response_b, unit.order
            )
            self._prompts[key] = render_chat(
                self.loaded.tokenizer, messages, add_generation_prompt=True, **self._template_kwargs
            )
        return self._prompts[key]

    def lengths(self, units: Sequence[Unit]) -> list[int]:
        """Prompt length per unit, for length bucketing."""
        return [len(self._ids(u)) for u in units]

    def allowance(self) -> int:
        """Tokens the judge may add after a prompt: generation, or reasoning and the prefix."""
        if self.params.mode == "generate":
            return self.params.max_new_tokens
        tail = self.loaded.tokenizer("\n" + VERDICT_PREFIX, add_special_tokens=False)
        return self.params.reasoning_tokens + len(tail["input_ids"])

    @property
    def window(self) -> int | None:
        """The model's context window (``max_position_embeddings``), if its config has one."""
        value = getattr(self.loaded.model.config, "max_position_embeddings", None)
        return int(value) if value else None

    def _content_free(self, order: str) -> dict[str, float]:
        """The content-free label logits of ``order`` (computed once per order and job)."""
        key = (-1, Order.BA.value if order == Order.BA.value else Order.AB.value)
        if key not in self._prompts:
            self._prompts[key] = self._ids(Unit(-1, key[1], "N/A", "N/A", "N/A"))
        if key[1] not in self._priors:
            model, tok = self.loaded.model, self.loaded.tokenizer
            self._priors[key[1]] = content_free_logits(model, tok, self._prompts[key])
        return self._priors[key[1]]

    def judge(self, units: Sequence[Unit]) -> list[JudgeOutput]:
        """Judge one batch on the local model (batches never mix orders in calibrated mode)."""
        if self.params.mode == "calibrated" and len({u.order for u in units}) > 1:
            by_order: dict[str, list[int]] = {}
            for k, u in enumerate(units):
                by_order.setdefault(u.order, []).append(k)
            out: list[JudgeOutput | None] = [None] * len(units)
            for ks in by_order.values():
                for k, o in zip(ks, self.judge([units[k] for k in ks]), strict=True):
                    out[k] = o
            return [o for o in out if o is not None]
        settings = JudgeSettings(
            mode=self.params.mode,  # type: ignore[arg-type]
            max_new_tokens=self.params.max_new_tokens,
            reasoning_tokens=self.params.reasoning_tokens,
            layers=tuple(self.layers) if self.layers else None,
            batch_size=self.params.batch_size,
            content_free=self._content_free(units[0].order)
            if self.params.mode == "calibrated"
            else None,
        )
        prompts = [self._ids(u) for u in units]
        return judge_batch(self.loaded.model, self.loaded.tokenizer, prompts, settings)

    def verify(self, outputs: Sequence[JudgeOutput]) -> list[dict[str, Any]]:
        """Replay outputs by one teacher-forced forward each."""
        layers = self.layers or judge_layers(self.loaded.info.n_layers)
        return verify_replay(self.loaded.model, self.loaded.tokenizer, outputs, layers)


def _model_row(session: Session, name: str) -> dict[str, Any]:
    row: LanguageModel = get_language_model(session, name)
    return {"id": row.id, "path": row.path, "fingerprint": row.fingerprint, "dtype": row.dtype}


def load_registered(ctx: JobContext, name: str) -> tuple[LoadedModel, dict[str, Any]]:
    """The registered model ``name``, loaded once per worker process, and its registry row."""
    row = ctx.read(lambda s: _model_row(s, name))
    key = ("model", row["path"], row["fingerprint"], row["dtype"], ctx.device)
    if key not in ctx.cache:
        ctx.cache[key] = load_model(
            row["path"],
            device=ctx.device,
            dtype=row["dtype"],
            data_dir=ctx.store.settings.data_dir,
            expected_fingerprint=row["fingerprint"],
        )
    return ctx.cache[key], row


def make_engine(ctx: JobContext, params: JudgeParams) -> Engine:
    """The backend the job asks for."""
    if params.backend == "remote":
        from workers.engines.remote_judge import RemoteEngine

        return RemoteEngine.from_params(params)
    loaded, row = load_registered(ctx, params.model)
    return LocalEngine(loaded, params, row)


def activation_set_name(params: JudgeParams) -> str:
    """Name of the activation set holding a judge's AB pre-verdict states on a benchmark."""
    return f"judge:{params.judge}:{params.benchmark}"


def _store_ab_states(
    files: ShardFiles, units: Sequence[Unit], outputs: Sequence[JudgeOutput]
) -> set[int]:
    """Append the AB states of a batch as a shard; the instance ids that have a state."""
    keep = [
        (u.instance_id, o.state)
        for u, o in zip(units, outputs, strict=True)
        if u.order == Order.AB.value and o.state is not None
    ]
    if keep:
        files.append([i for i, _ in keep], np.stack([s for _, s in keep]))
    return {i for i, _ in keep}


# What a judgment row takes from the judge's output as it is.
_OUTPUT_FIELDS = (
    "raw_output",
    "slot",
    "confidence",
    "error",
    "label_logits",
    "prompt_tokens",
    "output_tokens",
)


def _results(
    units: Sequence[Unit], outputs: Sequence[JudgeOutput], captured: set[int], ref: str | None
) -> list[UnitResult]:
    return [
        UnitResult(
            unit=u,
            **attributes(o, _OUTPUT_FIELDS),
            activation_ref=ref if u.order == Order.AB.value and u.instance_id in captured else None,
            details={"seconds": round(o.seconds, 4), **o.details},
        )
        for u, o in zip(units, outputs, strict=True)
    ]


def _record_verify(session: Session, plan: JudgePlan, checks: dict[int, dict[str, Any]]) -> None:
    rows = session.scalars(
        select(Judgment).where(
            Judgment.detector_id == plan.detector_id,
            Judgment.order == Order.AB.value,
            Judgment.instance_id.in_(list(checks)),
        )
    )
    for judgment in rows:
        judgment.details = {**judgment.details, "verify": checks[judgment.instance_id]}
    session.flush()


def _verify_summary(checks: dict[int, dict[str, Any]]) -> dict[str, Any]:
    matches = [c["argmax_matches"] for c in checks.values() if c["argmax_matches"] is not None]
    diffs = [c["max_abs_diff"] for c in checks.values() if c["max_abs_diff"] is not None]
    return {
        "checked": len(matches),
        "argmax_matches": sum(matches),
        "max_abs_diff": max(diffs) if diffs else None,
    }


def audit(engine: Engine, params: JudgeParams, plan: JudgePlan) -> dict[str, Any] | None:
    """The context audit of a local run; drops the refused pairs' units from ``plan.pending``.

    Every unit of the run is audited (also those judged before a resume), so the audit of a
    resumed job is the same; refused units are never judged, and never truncated.
    """
    if not isinstance(engine, LocalEngine):
        return None  # the server tokenizes: no token count here
    found = audit_context(
        plan.units,
        engine.lengths(plan.units),
        allowance=engine.allowance(),
        requested=params.context_budget,
        window=engine.window,
    )
    refused = set(found.refused)
    kept = [u for u in plan.pending if u.instance_id not in refused]
    plan.pending[:] = kept
    return found.as_json(sum(u.instance_id in refused for u in plan.units))


def judge_plan(
    ctx: JobContext,
    params: JudgeParams,
    engine: Engine,
    plan: JudgePlan,
    *,
    details: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Judge ``plan.pending`` in length buckets, writing each batch; the job's result.

    ``details`` are added to every judgment written (a re-judging job marks its own). The
    result holds the judge's summary (:func:`finish_judging`), the context audit and the
    replay check.
    """
    context = audit(engine, params, plan)
    capture: FillingSet | None = None
    if isinstance(engine, LocalEngine) and engine.layers:
        capture = ctx.commit(
            lambda s: open_model_set(
                s,
                ctx.store.settings.data_dir,
                activation_set_name(params),
                benchmark_id=plan.benchmark_id,
                model=engine.loaded.info,
                model_id=engine.model_row["id"],
                layers=engine.layers,
                position_rule=POSITION_RULE,
                details={"judge": params.judge, "mode": params.mode},
            )
        )
    total = plan.total - (context["refused_units"] if context else 0)
    done = total - len(plan.pending)
    ctx.progress(done, total)
    to_verify: dict[int, JudgeOutput] = {}
    for batch in length_buckets(engine.lengths(plan.pending), params.batch_size):
        ctx.check()
        units = [plan.pending[i] for i in batch]
        outputs = engine.judge(units)
        for u, o in zip(units, outputs, strict=True):
            if u.order == Order.AB.value and len(to_verify) < params.verify and o.slot:
                to_verify[u.instance_id] = o
        done += len(units)

        def write(
            session: Session, units: list[Unit] = units, outputs: list[JudgeOutput] = outputs
        ) -> None:
            # The shard is written inside the batch's transaction, which holds the job: a worker
            # that lost its lease writes no file (and one killed before its commit leaves rows
            # that the next owner finds stored and does not store again).
            captured = _store_ab_states(capture.files, units, outputs) if capture else set()
            results = _results(units, outputs, captured, capture.name if capture else None)
            if details:
                results = [replace(r, details={**r.details, **details}) for r in results]
            write_results(session, plan, results, mode=params.mode)
            if capture:
                capture.sync(session)

        ctx.commit(write, done=done, total=total)
    result: dict[str, Any] = {"judge": params.judge, "mode": params.mode}
    if to_verify:
        records = engine.verify(list(to_verify.values()))
        checks = dict(zip(to_verify, records, strict=True))
        ctx.commit(lambda s: _record_verify(s, plan, checks))
        result["verify"] = _verify_summary(checks)
    result.update(ctx.commit(lambda s: finish_judging(s, plan)))
    if capture:
        result["activation_set"] = capture.name
    if context is not None:
        result["context_audit"] = context
    return result


@handles(JudgeParams)
def run_judge_job(ctx: JobContext) -> dict[str, Any]:
    """Handler of ``judge`` jobs: see the module docstring."""
    params = JudgeParams.from_dict(ctx.params)
    engine = make_engine(ctx, params)
    plan = ctx.commit(lambda s: plan_units(s, params, engine.describe()))
    return judge_plan(ctx, params, engine, plan)
