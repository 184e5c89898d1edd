"""Published judge prompt templates (FastChat llm_judge, Arena-Hard-Auto), read backwards.

:class:`PromptTemplate` gives back the question and answers a judge was shown, from its prompt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "ARENA_HARD",
    "FASTCHAT_PAIR",
    "FASTCHAT_SINGLE",
    "PromptTemplate",
]

_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True)
class PromptTemplate:
    """A judge prompt template and the anchored pattern that reads its placeholders back.

    A placeholder met a second time (the turn-1 question in both conversations of a two-turn
    prompt) must repeat the first value exactly.
    """

    name: str
    template: str
    _pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parts: list[str] = []
        seen: set[str] = set()
        at = 0
        for match in _PLACEHOLDER.finditer(self.template):
            parts.append(re.escape(self.template[at : match.start()]))
            name = match.group(1)
            # Lazy groups: the delimiters are long, fixed strings, so the first occurrence of
            # the next delimiter ends a value; a value containing one fails the match (or the
            # cross-check of the two orders), it is never silently cut.
            parts.append(f"(?P={name})" if name in seen else f"(?P<{name}>.*?)")
            seen.add(name)
            at = match.end()
        parts.append(re.escape(self.template[at:]))
        object.__setattr__(self, "_pattern", re.compile("".join(parts), re.DOTALL))

    @property
    def fields(self) -> tuple[str, ...]:
        """The placeholder names, in template order, each once."""
        return tuple(dict.fromkeys(_PLACEHOLDER.findall(self.template)))

    def parse(self, text: str) -> dict[str, str] | None:
        """The placeholder values of ``text``, or None when it does not follow the template."""
        match = self._pattern.fullmatch(text)
        return None if match is None else match.groupdict()


def _templates(*pairs: tuple[str, str]) -> dict[str, PromptTemplate]:
    return {name: PromptTemplate(name, template) for name, template in pairs}


# FastChat llm_judge's judge_prompts.jsonl (fastchat/llm_judge/data/judge_prompts.jsonl, the
# copy in data/mt-bench/): the user message of each prompt. The test suite checks these strings
# against that file.
_CONVERSATION = (
    "<|The Start of Assistant {who}'s Conversation with User|>\n\n### User:\n{{question_1}}\n\n"
    "### Assistant {who}:\n{{{a1}}}\n\n### User:\n{{question_2}}\n\n### Assistant {who}:\n"
    "{{{a2}}}\n\n<|The End of Assistant {who}'s Conversation with User|>"
)
_REFERENCE_CONVERSATION = (
    "<|The Start of Reference Answer|>\n\n### User:\n{question_1}\n\n### Reference answer:\n"
    "{ref_answer_1}\n\n### User:\n{question_2}\n\n### Reference answer:\n{ref_answer_2}\n\n"
    "<|The End of Reference Answer|>\n\n\n"
)
_ANSWERS = (
    "[The Start of Assistant A's Answer]\n{answer_a}\n[The End of Assistant A's Answer]\n\n"
    "[The Start of Assistant B's Answer]\n{answer_b}\n[The End of Assistant B's Answer]"
)
_REFERENCE = "[The Start of Reference Answer]\n{ref_answer_1}\n[The End of Reference Answer]\n\n"
_CONVERSATIONS = (
    _CONVERSATION.format(who="A", a1="answer_a_1", a2="answer_a_2")
    + "\n\n\n"
    + _CONVERSATION.format(who="B", a1="answer_b_1", a2="answer_b_2")
)
_SINGLE_INSTRUCTION = (
    "[Instruction]\nPlease act as an impartial judge and evaluate the quality of the response "
    "provided by an AI assistant to the user question displayed below. Your evaluation should "
    "consider {criteria}Be as objective as possible. After providing your explanation, you must "
    'rate the response on a scale of 1 to 10 by strictly following this format: "[[rating]]", '
    'for example: "Rating: [[5]]".\n\n[Question]\n{{question}}\n\n'
)
_GENERAL_CRITERIA = (
    "factors such as the helpfulness, relevance, accuracy, depth, creativity, and level of "
    "detail of the response. Begin your evaluation by providing a short explanation. "
)
_MATH_CRITERIA = (
    "correctness and helpfulness. You will be given a reference answer and the assistant's "
    "answer. Begin your evaluation by comparing the assistant's answer with the reference "
    "answer. Identify and correct any mistakes. "
)
_SINGLE_ANSWER = "[The Start of Assistant's Answer]\n{answer}\n[The End of Assistant's Answer]"
_SINGLE_CONVERSATION = _CONVERSATION.format(who="A", a1="answer_1", a2="answer_2")

FASTCHAT_PAIR: dict[str, PromptTemplate] = _templates(
    ("pair-v2", "[User Question]\n{question}\n\n" + _ANSWERS),
    ("pair-v2-multi-turn", _CONVERSATIONS),
    ("pair-math-v1", "[User Question]\n{question}\n\n" + _REFERENCE + _ANSWERS),
    ("pair-math-v1-multi-turn", _REFERENCE_CONVERSATION + _CONVERSATIONS),
)
"""FastChat's pairwise judge prompts by name (``judge[1]`` of a ``*_pair.jsonl`` row)."""

FASTCHAT_SINGLE: dict[str, PromptTemplate] = _templates(
    ("single-v1", _SINGLE_INSTRUCTION.format(criteria=_GENERAL_CRITERIA) + _SINGLE_ANSWER),
    (
        "single-math-v1",
        _SINGLE_INSTRUCTION.format(criteria=_MATH_CRITERIA) + _REFERENCE + _SINGLE_ANSWER,
    ),
    ("single-v1-multi-turn", _SINGLE_CONVERSATION),
    ("single-math-v1-multi-turn", _REFERENCE_CONVERSATION + _SINGLE_CONVERSATION),
)
"""FastChat's single-answer grading prompts by name (``judge[1]`` of a ``*_single.jsonl`` row)."""

ARENA_HARD = PromptTemplate(
    "arena-hard",
    "<|User Prompt|>\n{question_1}\n\n<|The Start of Assistant A's Answer|>\n{answer_1}\n"
    "<|The End of Assistant A's Answer|>\n\n<|The Start of Assistant B's Answer|>\n{answer_2}\n"
    "<|The End of Assistant B's Answer|>",
)
"""Arena-Hard-Auto's judge user prompt (one turn), as ``games[i].user_prompt`` holds it."""
