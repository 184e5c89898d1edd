"""MMLU-Redux's error types, and the one a review decision on a choice item's label records.

The review pages do not ask for a type: :func:`error_type_of` reads it from what review recorded.
"""

from __future__ import annotations

import re

from app.errors import InvalidInput
from app.services.evidence.resolution import Resolution

__all__ = ["ERROR_TYPES", "OK", "WRONG_GROUNDTRUTH", "error_type_of"]

OK = "ok"
WRONG_GROUNDTRUTH = "wrong_groundtruth"
NO_CORRECT_ANSWER = "no_correct_answer"
MULTIPLE_CORRECT_ANSWERS = "multiple_correct_answers"
BAD_QUESTION_CLARITY = "bad_question_clarity"
BAD_OPTIONS_CLARITY = "bad_options_clarity"
EXPERT = "expert"
ERROR_TYPES: tuple[str, ...] = (
    OK,
    WRONG_GROUNDTRUTH,
    NO_CORRECT_ANSWER,
    MULTIPLE_CORRECT_ANSWERS,
    BAD_QUESTION_CLARITY,
    BAD_OPTIONS_CLARITY,
    EXPERT,
)
"""MMLU-Redux's error types (``expert``: judging the label needs domain expertise)."""
# The queue outcomes of app.services.evidence.outcomes, and the defect tags of
# app.services.review.queues.KIND_TAGS that name an MMLU-Redux type.
_OUTCOME_TYPES = {
    "no correct option": NO_CORRECT_ANSWER,
    "several correct": MULTIPLE_CORRECT_ANSWERS,
    "question unclear": BAD_QUESTION_CLARITY,
}
# In the order a kept label's tags are read: the first present decides.
_CLARITY_TAGS = {
    "bad question clarity": BAD_QUESTION_CLARITY,
    "bad options clarity": BAD_OPTIONS_CLARITY,
    # The names choice queues offered before they took MMLU-Redux's (events keep them).
    "unclear question": BAD_QUESTION_CLARITY,
    "unclear options": BAD_OPTIONS_CLARITY,
    "needs expertise": EXPERT,
}
# In the order the tags of an item adjudicated to no label are read.
_TAG_TYPES = {
    "wrong ground truth": WRONG_GROUNDTRUTH,
    "no correct answer": NO_CORRECT_ANSWER,
    "multiple correct answers": MULTIPLE_CORRECT_ANSWERS,
    **_CLARITY_TAGS,
}
_EXPLICIT = re.compile(r"\berror_type\s*[:=]\s*([A-Za-z_]+)", re.IGNORECASE)


def error_type_of(original: str | None, res: Resolution) -> str | None:
    """The MMLU-Redux error type a review decision records, or None when it says none.

    Read in this order:

    1. ``error_type: TYPE`` (or ``=``, any case) in a deciding reason: the reviewer's
       explicit choice of any type.
    2. The decided value: another option letter than the original is ``wrong_groundtruth``;
       the outcomes ``no correct option``, ``several correct`` and ``question unclear`` are
       ``no_correct_answer``, ``multiple_correct_answers`` and ``bad_question_clarity``
       (``bad_options_clarity`` when tagged ``bad options clarity``).
    3. The original letter kept: ``ok``, unless tagged ``bad question clarity``, ``bad
       options clarity`` or ``needs expertise`` (``bad_question_clarity``,
       ``bad_options_clarity``, ``expert``; the first of these in that order). The older tag
       names ``unclear question`` and ``unclear options`` count as the first two.
    4. No label (a null adjudication): the first taxonomy tag (``wrong ground truth``, ``no
       correct answer``, ``multiple correct answers`` or a clarity tag), else None.

    Raises
    ------
    InvalidInput
        A reason names an ``error_type`` that is not one of :data:`ERROR_TYPES`.

    """
    for event in res.deciding:
        found = _EXPLICIT.search(event.reason)
        if found is not None:
            named = found.group(1).lower()
            if named not in ERROR_TYPES:
                raise InvalidInput(
                    f"the reason names error_type {named!r}; known: {', '.join(ERROR_TYPES)}",
                    field="reason",
                )
            return named
    tags = {tag for event in res.deciding for tag in event.tags}
    value = res.resolved
    if value in _OUTCOME_TYPES:
        if value == "question unclear" and tags & {"bad options clarity", "unclear options"}:
            return BAD_OPTIONS_CLARITY
        return _OUTCOME_TYPES[value]
    if value is not None and value != original:
        return WRONG_GROUNDTRUTH
    table = _CLARITY_TAGS if value is not None else _TAG_TYPES
    kept = next((kind for tag, kind in table.items() if tag in tags), None)
    if value is None:
        return kept
    return kept or OK
