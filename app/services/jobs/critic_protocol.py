"""The critic protocol: a model checks a benchmark item's labelled answer and the question itself.

Pure Python, shared by the local (transformers) and remote (OpenAI-compatible) critics. The
critic sees the question, its options and the labelled answer, and ends with one verdict:
``correct`` (the labelled answer is right and the question is sound), ``wrong`` (another
answer is right) or ``invalid`` (the question is flawed: unclear, no right option, several).
Either defect makes the item's label suspect, so the critic's score is the probability of
``wrong`` or ``invalid``: one minus the softmax weight of ``correct`` over the three verdict
tokens' logits (or log-probabilities, which differ from logits by one constant per position).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from app.services.evidence.choices import option_letters
from app.services.jobs.judge_protocol import VERDICT_PREFIX
from app.services.jobs.prompt_template import option_lines, subject_of

__all__ = [
    "CRITIC_PLACEHOLDERS",
    "DEFAULT_SYSTEM",
    "DEFAULT_TEMPLATE",
    "OK_VERDICT",
    "VERDICTS",
    "VERDICT_PREFIX",
    "CriticParse",
    "defect_probability",
    "parse_verdict",
    "render_item",
    "verdict_probabilities",
]

OK_VERDICT = "correct"
# Each is one token after "VERDICT:" and after "VERDICT: " for SmolLM2's tokenizer (the local
# engine checks this for the model it loads).
VERDICTS = (OK_VERDICT, "wrong", "invalid")

DEFAULT_SYSTEM = (
    "You are a careful subject expert who checks exam questions and their answer keys for mistakes."
)
DEFAULT_TEMPLATE = """Check this exam question{about} and its answer key.

[Question]
{question}

[Options]
{options}

[Answer key]
{key}

Reply "correct" if the answer key gives the one right answer, "wrong" if another answer is \
right instead, or "invalid" if the question itself is flawed (unclear, no right option, or \
several right options). Reason briefly (at most three sentences), then finish with a last line \
that is exactly "VERDICT: correct", "VERDICT: wrong" or "VERDICT: invalid"."""

CRITIC_PLACEHOLDERS = ("question", "options", "key", "subject", "about")
REQUIRED_PLACEHOLDERS = ("question", "key")
NO_OPTIONS = "(none: the answer is free text)"

_VERDICT_LINE = re.compile(r"(?:^|\n)[ \t]*VERDICT:[ ]?(" + "|".join(VERDICTS) + r")[ \t]*$")


def render_item(template: str, payload: Mapping[str, object], key: str) -> str:
    """The user message for one item.

    Parameters
    ----------
    template
        Text with the placeholders of :data:`CRITIC_PLACEHOLDERS`.
    payload
        The item's payload: ``question``, ``options`` (choice items) and ``subject``.
    key
        The labelled answer: an option letter on choice items (shown with its text), the
        reference text on answer items.

    """
    options = payload.get("options")
    lines = NO_OPTIONS
    shown = key
    if isinstance(options, list) and options:
        lines = option_lines([str(o) for o in options])
        letters = option_letters(len(options))
        if key in letters:
            shown = f"{key}. {options[letters.index(key)]}"
    subject = subject_of(dict(payload))
    return template.format(
        question=payload.get("question", ""),
        options=lines,
        key=shown,
        subject=subject,
        about=f" about {subject}" if subject else "",
    )


@dataclass(frozen=True)
class CriticParse:
    """A strict parse of a critic's text: the verdict, or why the text has none."""

    verdict: str | None
    error: str | None

    @property
    def valid(self) -> bool:
        """Whether the text followed the format."""
        return self.error is None


def parse_verdict(text: str) -> CriticParse:
    """Parse ``... VERDICT: correct|wrong|invalid`` strictly; never guess.

    The verdict must be the last non-blank line, spelled exactly (lower case, no period), and
    ``VERDICT:`` must occur once. Anything else has no verdict and says why.
    """
    found = _VERDICT_LINE.search(text.rstrip())
    if found is None:
        return CriticParse(None, "no final 'VERDICT: correct|wrong|invalid' line")
    if text.count(VERDICT_PREFIX) != 1:
        return CriticParse(None, "more than one VERDICT")
    return CriticParse(found.group(1), None)


def verdict_probabilities(scores: Mapping[str, float]) -> dict[str, float]:
    """Softmax of the verdict labels' logits (or log-probabilities), in :data:`VERDICTS` order.

    A label absent from ``scores`` (a server's top log-probabilities did not list it) is left
    out: the softmax is over the labels given, and the caller records which were missing.

    Raises
    ------
    ValueError
        If ``scores`` names no verdict label.

    """
    given = [v for v in VERDICTS if v in scores]
    if not given:
        raise ValueError("no verdict label has a score")
    values = [float(scores[v]) for v in given]
    top = max(values)
    weights = [math.exp(v - top) for v in values]
    total = sum(weights)
    return {v: w / total for v, w in zip(given, weights, strict=True)}


def defect_probability(probabilities: Mapping[str, float]) -> float:
    """The probability that the item is defective: its verdict is not ``correct``.

    Labels absent from ``probabilities`` count as zero (see :func:`verdict_probabilities`).
    """
    # A sum of the small terms, not 1 - p(correct): keeps precision when p(correct) is near 1.
    return sum(float(p) for v, p in probabilities.items() if v != OK_VERDICT)
