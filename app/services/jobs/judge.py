"""The ``judge`` job kind: a pairwise benchmark judged by a local or remote model in both orders."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.flips import flip_label_name
from app.services.evidence.language_models import get_language_model
from app.services.evidence.model_runs import RunDetector
from app.services.jobs.judge_protocol import DEFAULT_SYSTEM, DEFAULT_TEMPLATE, JudgePrompt
from app.services.jobs.kind import JobLink, JobParams, job_kind
from app.services.table.instance_filter import FlipState, InstanceFilter
from app.tables import Benchmark, BenchmarkKind, Order

MODES = ("generate", "forced", "calibrated")
BACKENDS = ("local", "remote")
_ORDERS = (Order.AB.value, Order.BA.value)


@job_kind
@dataclass(frozen=True)
class JudgeParams(JobParams):
    """What to judge, with which model and how (see ``appellate judge --help`` for each field).

    ``model`` names a registered local model (backend ``local``) or the model id on an
    OpenAI-compatible server at ``base_url`` (backend ``remote``). With a ``limit``, the pairs
    are a sample of that size drawn with ``seed`` that prefers pairs other detectors scored
    (:func:`app.services.jobs.judge_sampling.sample_pairs`); without one, every pair.
    ``context_budget`` (tokens, default the model's window) refuses pairs whose prompt and
    allowance exceed it (:mod:`app.services.jobs.judge_context`).
    """

    benchmark: str
    model: str
    judge: str = ""
    backend: str = "local"
    base_url: str | None = None
    orders: list[str] = field(default_factory=lambda: list(_ORDERS))
    repeat_subset: int = 0
    limit: int | None = None
    seed: int = 0
    mode: str = "generate"
    max_new_tokens: int = 256
    reasoning_tokens: int = 0
    batch_size: int = 4
    capture: bool = True
    verify: int = 0
    context_budget: int | None = None
    system: str = DEFAULT_SYSTEM
    template: str = DEFAULT_TEMPLATE

    kind = "judge"
    title = "Judge"

    def validate(self) -> None:
        """Modes, backends, orders and counts in range; a remote judge needs its server."""
        checks: list[tuple[bool, str, str]] = [
            (self.mode in MODES, "mode", f"must be one of {', '.join(MODES)}"),
            (self.backend in BACKENDS, "backend", f"must be one of {', '.join(BACKENDS)}"),
            (
                bool(self.orders) and set(self.orders) <= set(_ORDERS),
                "orders",
                "must be AB, BA or AB,BA",
            ),
            (len(set(self.orders)) == len(self.orders), "orders", "repeats an order"),
            (self.repeat_subset >= 0, "repeat_subset", "must be 0 or more"),
            (self.limit is None or self.limit >= 1, "limit", "must be at least 1"),
            (self.seed >= 0, "seed", "must be 0 or more"),
            (self.max_new_tokens >= 1, "max_new_tokens", "must be at least 1"),
            (self.reasoning_tokens >= 0, "reasoning_tokens", "must be 0 or more"),
            (self.batch_size >= 1, "batch_size", "must be at least 1"),
            (self.verify >= 0, "verify", "must be 0 or more"),
            (
                self.context_budget is None or self.context_budget >= 1,
                "context_budget",
                "must be at least 1 token",
            ),
            (
                self.context_budget is None or self.backend == "local",
                "context_budget",
                "the context audit counts tokens with a local model's tokenizer",
            ),
            (
                self.backend == "local" or bool(self.base_url),
                "base_url",
                "the remote backend needs a server URL",
            ),
            (
                self.backend == "local" or self.mode == "generate",
                "mode",
                "a remote judge can only generate (no forced-choice forward)",
            ),
        ]
        for ok, name, reason in checks:
            if not ok:
                raise InvalidInput(reason, field=name)
        JudgePrompt(self.system, self.template)  # validates the placeholders
        if not self.judge:
            self._set("judge", f"{self.model}/{self.mode}")

    @property
    def prompt(self) -> JudgePrompt:
        """The judge's system prompt and template."""
        return JudgePrompt(self.system, self.template)

    @property
    def captures(self) -> bool:
        """Whether AB judgments keep activations (local models only)."""
        return self.capture and self.backend == "local" and Order.AB.value in self.orders

    def run_detector(self) -> RunDetector:
        """The judge detector the run writes its judgments under."""
        return RunDetector(self.judge, "judge", f"{self.model} ({self.mode})")

    @classmethod
    def session_defaults(cls, session: Session, data: dict[str, Any]) -> dict[str, Any]:
        """No mode (None or empty) means the mode the registered model asks for."""
        if not data.get("mode") and "model" in data:
            data["mode"] = default_mode(session, data["model"], data.get("backend", "local"))
        return data

    def check(self, session: Session) -> None:
        """The benchmark holds pairs; a local model is registered."""
        bench = get_benchmark(session, self.benchmark)
        if bench.kind != BenchmarkKind.pairwise:
            raise InvalidInput(
                f"benchmark {bench.name!r} holds {bench.kind} instances; a judge needs pairs",
                field="benchmark",
            )
        if self.backend == "local":
            get_language_model(session, self.model)

    def describe(self) -> str:
        """E.g. "Judge jb with smollm2 (forced) as smollm2/forced, orders AB and BA, every pair"."""
        where = self.model if self.backend == "local" else f"{self.model} at {self.base_url}"
        # The seed says which sample: the same limit with another seed judges other pairs.
        sample = "every pair"
        if self.limit:
            sample = f"a sample of {self.limit} pairs (seed {self.seed})"
        text = f"Judge {self.benchmark} with {where} ({self.mode}) as {self.judge}, orders "
        text += f"{' and '.join(self.orders)}, {sample}"
        if self.repeat_subset:
            text += f"; AB repeated on {self.repeat_subset}"
        if self.context_budget:
            text += f"; context budget {self.context_budget} tokens"
        return text

    def links(self, result: Mapping[str, Any]) -> list[JobLink]:
        """Its flip labels' metrics, its scores and flipped pairs; the table for one order."""
        bench, judge = self.benchmark, self.judge
        both = {Order.AB.value, Order.BA.value} <= set(self.orders)
        if not both or not result.get("retained_pairs"):
            # One order (or nothing valid in both): no flip labels and no score to show.
            return [JobLink(f"{bench}: the instance table", "table", bench)]
        flips = (("label", flip_label_name(judge)),)
        return [
            JobLink(f"Metrics of {flip_label_name(judge)}", "metrics", bench, query=flips),
            JobLink("Its score beside the other detectors (metric matrix)", "metrics", bench),
            JobLink(
                "The pairs it scored (instance table)",
                "table",
                bench,
                table=InstanceFilter(score_detector=judge, score_min=0.0),
            ),
            JobLink(
                "Its flipped pairs",
                "table",
                bench,
                table=InstanceFilter(judge=judge, flip=FlipState.yes),
            ),
        ]


def default_mode(session: Session, model: str, backend: str = "local") -> str:
    """The judge mode a registered model asks for (``details.judge_mode``), else ``generate``.

    Small chat models that cannot keep the strict format (SmolLM2) register ``forced``.
    """
    if backend != "local":
        return "generate"
    details = get_language_model(session, model).details or {}
    mode = details.get("judge_mode", "generate")
    return mode if mode in MODES else "generate"


def judgeable_benchmarks(session: Session) -> list[str]:
    """Names of the pairwise benchmarks (those a judge job can run on), sorted."""
    q = select(Benchmark.name).where(Benchmark.kind == BenchmarkKind.pairwise.value)
    return list(session.scalars(q.order_by(Benchmark.name)))
