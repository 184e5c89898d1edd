"""The ``critic`` job kind: a model checks each item's labelled answer and question, on demand.

A judge model (a registered local one, or a model on an OpenAI-compatible server) reads a choice
or answer item with its labelled answer and gives a verdict (:mod:`critic_protocol`). Its score,
the probability that the item is defective, is stored as a detector ``critic:<model>`` of kind
``critic``: the metric matrix measures it against the expert ``defect`` label, the label-errors
list ranks by it (``-d critic:<model>``), and rankers can read it as a feature.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.answer_matrix import ANSWER_KINDS
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.detectors import CRITIC_KIND, CRITIC_PREFIX
from app.services.evidence.language_models import get_language_model
from app.services.evidence.model_runs import RunDetector
from app.services.jobs.critic_protocol import (
    CRITIC_PLACEHOLDERS,
    DEFAULT_SYSTEM,
    DEFAULT_TEMPLATE,
    REQUIRED_PLACEHOLDERS,
    render_item,
)
from app.services.jobs.judge import BACKENDS, default_mode
from app.services.jobs.kind import JobLink, JobParams, job_kind
from app.services.jobs.prompt_template import check_template
from app.services.table.instance_filter import InstanceFilter

# generate: the model writes its reasoning and verdict, parsed strictly; forced: the reply is
# prefilled with "VERDICT:" and the verdict is the argmax of the label tokens (always valid).
CRITIC_MODES = ("generate", "forced")


@job_kind
@dataclass(frozen=True)
class CriticParams(JobParams):
    """Which items to check, with which model and how.

    ``model`` names a registered local model (backend ``local``) or the model id on an
    OpenAI-compatible server at ``base_url`` (backend ``remote``, ``generate`` only). ``mode``
    ``generate`` parses the model's last line strictly (items without a valid verdict get no
    score and are counted); ``forced`` prefills ``VERDICT:`` and reads the label tokens' logits
    (every item scored). No mode means the registered model's own (``forced`` for SmolLM2, whose
    replies are almost never a verdict line), ``generate`` for a server.
    With a ``limit``, the items are a sample of that size drawn with ``seed``; without, all.
    ``detector`` defaults to ``critic:<model>``.
    """

    benchmark: str
    model: str
    detector: str = ""
    backend: str = "local"
    base_url: str | None = None
    mode: str | None = None
    limit: int | None = None
    seed: int = 0
    max_new_tokens: int = 256
    batch_size: int = 4
    system: str = DEFAULT_SYSTEM
    template: str = DEFAULT_TEMPLATE

    kind = "critic"
    title = "Critic"

    def validate(self) -> None:
        """Modes, backends and counts in range; a remote critic needs its server and generates."""
        if not self.mode:  # built without the store's default (see session_defaults)
            self._set("mode", "generate")
        checks: list[tuple[bool, str, str]] = [
            (self.mode in CRITIC_MODES, "mode", f"must be one of {', '.join(CRITIC_MODES)}"),
            (self.backend in BACKENDS, "backend", f"must be one of {', '.join(BACKENDS)}"),
            (self.limit is None or self.limit >= 1, "limit", "must be at least 1"),
            (self.seed >= 0, "seed", "must be 0 or more"),
            (self.max_new_tokens >= 1, "max_new_tokens", "must be at least 1"),
            (self.batch_size >= 1, "batch_size", "must be at least 1"),
            (
                self.backend == "local" or bool(self.base_url),
                "base_url",
                "the remote backend needs a server URL",
            ),
            (
                self.backend == "local" or self.mode == "generate",
                "mode",
                "a remote critic can only generate (no forced-choice forward)",
            ),
        ]
        for ok, name, reason in checks:
            if not ok:
                raise InvalidInput(reason, field=name)
        check_template(self.template, REQUIRED_PLACEHOLDERS, CRITIC_PLACEHOLDERS)
        if not self.detector:
            self._set("detector", f"{CRITIC_PREFIX}{self.model}")

    @classmethod
    def session_defaults(cls, session: Session, data: dict[str, Any]) -> dict[str, Any]:
        """No mode (None or empty) means the mode the registered model asks for."""
        if not data.get("mode") and "model" in data:
            mode = default_mode(session, data["model"], data.get("backend", "local"))
            data["mode"] = mode if mode in CRITIC_MODES else "forced"
        return data

    def check(self, session: Session) -> None:
        """A choice or answer benchmark; a local model is registered."""
        bench = get_benchmark(session, self.benchmark)
        if bench.kind not in ANSWER_KINDS:
            raise InvalidInput(
                f"benchmark {bench.name!r} holds {bench.kind} items; a critic checks the "
                "labelled answers of choice or answer items",
                field="benchmark",
            )
        if self.backend == "local":
            get_language_model(session, self.model)

    def describe(self) -> str:
        """E.g. "Critic smollm2 (forced) checks mmlu's labels as critic:smollm2, every item"."""
        where = self.model if self.backend == "local" else f"{self.model} at {self.base_url}"
        items = "every item"
        if self.limit:
            items = f"a sample of {self.limit} items (seed {self.seed})"
        return (
            f"Critic {where} ({self.mode}) checks {self.benchmark}'s labels as {self.detector}, "
            f"{items}"
        )

    def links(self, result: Mapping[str, Any]) -> list[JobLink]:
        """Its score beside the other detectors, and the items it scored (when it scored any)."""
        matrix = JobLink(
            "Its score beside the other detectors (metric matrix)", "metrics", self.benchmark
        )
        if not result.get("scored"):
            table = JobLink(f"{self.benchmark}: the instance table", "table", self.benchmark)
            return [matrix, table]
        scored = InstanceFilter(score_detector=self.detector, score_min=0.0)
        return [
            matrix,
            JobLink("The items it scored (instance table)", "table", self.benchmark, table=scored),
        ]

    def run_detector(self) -> RunDetector:
        """The detector the run writes its scores under."""
        where = self.model if self.backend == "local" else f"{self.model} at {self.base_url}"
        return RunDetector(
            self.detector, CRITIC_KIND, f"{where} ({self.mode}): P(the labelled answer is wrong)"
        )

    def user_message(self, payload: Mapping[str, Any], key: str) -> str:
        """The prompt of one item whose labelled answer is ``key``."""
        return render_item(self.template, payload, key)

    def messages(self, payload: Mapping[str, Any], key: str) -> list[dict[str, str]]:
        """The chat of one item: the system prompt (if any) and the user message."""
        out = [{"role": "user", "content": self.user_message(payload, key)}]
        if self.system:
            out.insert(0, {"role": "system", "content": self.system})
        return out
