"""Parameters of a judge job, validated once for the CLI, the web form and the worker."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.language_models import get_language_model
from app.services.evidence.model_runs import RunDetector
from app.services.jobs import queue as job_queue
from app.services.jobs.judge_protocol import DEFAULT_SYSTEM, DEFAULT_TEMPLATE, JudgePrompt
from app.tables import Benchmark, BenchmarkKind, Job, Order

JUDGE_JOB = "judge"
MODES = ("generate", "forced", "calibrated")
BACKENDS = ("local", "remote")
_ORDERS = (Order.AB.value, Order.BA.value)


@dataclass(frozen=True)
class JudgeParams:
    """What to judge, with which model and how (see ``appellate judge --help`` for each field).

    ``model`` names a registered local model (backend ``local``) or the model id on an
    OpenAI-compatible server at ``base_url`` (backend ``remote``). With a ``limit``, the pairs
    are a sample of that size drawn with ``seed`` that prefers pairs other detectors scored
    (:func:`app.services.jobs.judge_sampling.sample_pairs`); without one, every pair.
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
    system: str = DEFAULT_SYSTEM
    template: str = DEFAULT_TEMPLATE

    def __post_init__(self) -> None:
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
            object.__setattr__(self, "judge", f"{self.model}/{self.mode}")

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

    def as_dict(self) -> dict[str, Any]:
        """JSON-able job parameters."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JudgeParams:
        """Parameters from a job row (unknown keys are refused).

        Raises
        ------
        InvalidInput
            For an unknown key or an invalid value.

        """
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise InvalidInput(f"unknown judge parameters {unknown}", field="params")
        return cls(**data)


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


def enqueue_judge(session: Session, params: JudgeParams) -> Job:
    """Check the benchmark (pairwise) and model exist, then queue a judge job.

    Raises
    ------
    NotFound
        For an unknown benchmark or (local backend) model.
    InvalidInput
        For a benchmark that is not pairwise.

    """
    bench = get_benchmark(session, params.benchmark)
    if bench.kind != BenchmarkKind.pairwise:
        raise InvalidInput(
            f"benchmark {bench.name!r} holds {bench.kind} instances; a judge needs pairs",
            field="benchmark",
        )
    if params.backend == "local":
        get_language_model(session, params.model)
    return job_queue.enqueue(session, JUDGE_JOB, params.as_dict())
