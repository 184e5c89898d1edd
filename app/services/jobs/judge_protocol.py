"""The pairwise judge protocol: prompt template, presentation orders, strict output parsing.

Pure Python, shared by the local (transformers) and remote (OpenAI-compatible) judges. A slot is
the position a response is shown in ("A" = first); an identity is which response it is. In the
AB order slot A shows response A; in BA slot A shows response B.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from app.errors import InvalidInput
from app.tables import Choice, Order

SLOTS = ("A", "B")
VERDICT_PREFIX = "VERDICT:"
PLACEHOLDERS = ("{prompt}", "{first}", "{second}")

DEFAULT_SYSTEM = (
    "You are an impartial judge. You compare two responses to the same question and decide "
    "which one is better: more correct first, then more helpful."
)
# Brief reasoning, a verbalised confidence and a final single-token verdict, as in the seed study.
DEFAULT_TEMPLATE = """[Question]
{prompt}

[Response A]
{first}

[Response B]
{second}

Which response is better? Reason briefly (at most three sentences). Then write your confidence \
that your verdict is right as a line "CONFIDENCE: <0-100>", and finish with a last line that is \
exactly "VERDICT: A" or "VERDICT: B"."""

_CONFIDENCE = re.compile(r"^\s*CONFIDENCE:\s*(\d{1,3})\s*%?\s*$", re.MULTILINE)
_FINAL_VERDICT = re.compile(r"(?:^|\n)\s*VERDICT:\s?([AB])\s*$")


@dataclass(frozen=True)
class JudgePrompt:
    """The system prompt and user-message template of a judge (placeholders in ``PLACEHOLDERS``)."""

    system: str = DEFAULT_SYSTEM
    template: str = DEFAULT_TEMPLATE

    def __post_init__(self) -> None:
        missing = [p for p in PLACEHOLDERS if p not in self.template]
        if missing:
            raise InvalidInput(f"the judge template lacks {', '.join(missing)}", field="template")

    def messages(
        self, prompt: str, response_a: str, response_b: str, order: str
    ) -> list[dict[str, str]]:
        """Chat messages for one pair shown in ``order`` (AB, BA or AB-repeat)."""
        first, second = (response_b, response_a) if order == Order.BA else (response_a, response_b)
        # Substitution by replace, not str.format: responses are full of braces (code, LaTeX).
        user = self.template
        for key, value in (("{first}", first), ("{second}", second), ("{prompt}", prompt)):
            user = user.replace(key, value)
        out = [{"role": "user", "content": user}]
        if self.system:
            out.insert(0, {"role": "system", "content": self.system})
        return out


def identity(slot: str, order: str) -> str:
    """The response identity (A or B) shown in ``slot`` under ``order``."""
    if slot not in SLOTS:
        raise ValueError(f"not a slot: {slot!r}")
    if order == Order.BA:
        return "B" if slot == "A" else "A"
    return slot


@dataclass(frozen=True)
class ParsedOutput:
    """A strict parse of a judge's text: slot, confidence, and why it is invalid (if it is)."""

    slot: str | None
    confidence: float | None
    error: str | None

    @property
    def valid(self) -> bool:
        """Whether the output followed the format."""
        return self.error is None

    def choice(self, order: str) -> str:
        """The identity chosen, or ``invalid``."""
        return identity(self.slot, order) if self.slot and self.valid else Choice.invalid.value


def parse_output(text: str) -> ParsedOutput:
    """Parse ``... CONFIDENCE: n ... VERDICT: X`` strictly; never guess.

    The verdict must be the last non-blank line; exactly one confidence line in 0-100 must come
    before it. Anything else is invalid, with the reason.
    """
    verdict = _FINAL_VERDICT.search(text)
    if verdict is None:
        return ParsedOutput(None, None, "no final 'VERDICT: A|B' line")
    if len(re.findall(r"VERDICT:", text)) != 1:
        return ParsedOutput(verdict.group(1), None, "more than one VERDICT")
    found = _CONFIDENCE.findall(text[: verdict.start() + 1])
    if len(found) != 1:
        reason = "no CONFIDENCE line" if not found else "more than one CONFIDENCE line"
        return ParsedOutput(verdict.group(1), None, reason)
    confidence = float(found[0])
    if confidence > 100:
        return ParsedOutput(verdict.group(1), None, f"confidence {found[0]} is above 100")
    return ParsedOutput(verdict.group(1), confidence, None)


def strip_verdict_tail(text: str) -> str:
    """The reasoning part of an output: everything before its first ``VERDICT:`` (forced mode)."""
    at = text.find(VERDICT_PREFIX)
    return text if at < 0 else text[:at]
