"""SQL for fields inside ``Instance.payload``: slice fields, text search and short previews.

Paths are rendered as literals (never bound parameters) so that expression indexes such as
``(benchmark_id, json_extract(payload, '$.source'))`` can match the query text.
"""

from __future__ import annotations

import json
import re

from sqlalchemy import ColumnElement, String, Text, and_, cast, exists, func, literal_column, or_
from sqlalchemy import select as sa_select
from sqlalchemy.sql.expression import type_coerce

from app.tables import Instance

# Payload fields that name a slice of a benchmark, in display order, as the importers write
# them: JudgeBench `source` and `response_model`, MT-Bench `category`, `model_a` and `model_b`,
# statement sets `dataset`, lie-detector items `persona` and `condition`, MMLU `subject`.
SLICE_FIELDS: tuple[str, ...] = (
    "source",
    "category",
    "dataset",
    "response_model",
    "model_a",
    "model_b",
    "persona",
    "condition",
    "subject",
)

# The long text fields of each kind, in reading order.
TEXT_FIELDS: dict[str, tuple[str, ...]] = {
    "pairwise": ("prompt", "response_a", "response_b"),
    "statement": ("statement",),
    "response": ("system_prompt", "question", "response"),
    "choice": ("question",),
    "answer": ("question",),
}

# Structured fields a kind's pages show in their own way (a choice item's lettered options).
SHOWN_APART: dict[str, tuple[str, ...]] = {"choice": ("options",)}

# The field whose opening words identify a row in the instance table.
PREVIEW_FIELD: dict[str, str] = {
    "pairwise": "prompt",
    "statement": "statement",
    "response": "question",
    "choice": "question",
    "answer": "question",
}

_FIELD_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
LIKE_ESCAPE = "/"


def payload_text(dialect: str, field: str) -> ColumnElement[str]:
    """The text value of top-level payload ``field`` (NULL when absent).

    Parameters
    ----------
    dialect : str
        ``sqlite`` or ``postgresql``.
    field : str
        A plain identifier; anything else is refused because it is rendered literally.

    Returns
    -------
    ColumnElement
        ``json_extract(instances.payload, '$.field')`` or ``instances.payload ->> 'field'``.

    """
    if not _FIELD_NAME.fullmatch(field):
        raise ValueError(f"not a payload field name: {field!r}")
    if dialect == "postgresql":
        expr = Instance.payload.op("->>")(literal_column(f"'{field}'"))
    else:
        expr = func.json_extract(Instance.payload, literal_column(f"'$.{field}'"))
    return type_coerce(expr, String)


def preview(dialect: str, field: str, length: int = 140) -> ColumnElement[str]:
    """The first ``length`` characters of payload ``field``, cut in the database."""
    return func.substr(payload_text(dialect, field), 1, length)


def like_pattern(needle: str) -> str:
    """A ``%needle%`` LIKE pattern with ``%``, ``_`` and the escape character escaped."""
    escaped = (
        needle.replace(LIKE_ESCAPE, LIKE_ESCAPE * 2)
        .replace("%", LIKE_ESCAPE + "%")
        .replace("_", LIKE_ESCAPE + "_")
    )
    return f"%{escaped}%"


def text_search(dialect: str, needle: str) -> ColumnElement[bool]:
    """Rows whose external id, group or any top-level payload value contains ``needle``.

    Case-insensitive for ASCII letters on both dialects. The payload is first matched as raw
    JSON text against the needle written the way the JSON encoder writes it (cheap, but it
    also hits key names), then confirmed on the decoded values.

    Parameters
    ----------
    dialect : str
        ``sqlite`` or ``postgresql``.
    needle : str
        The text to find, taken literally (``%`` and ``_`` are not wildcards).

    Returns
    -------
    ColumnElement
        A boolean condition on ``Instance``.

    """
    pattern = like_pattern(needle)
    if dialect == "postgresql":
        # JSONB's text form keeps non-ASCII characters and escapes like json.dumps does.
        raw = like_pattern(json.dumps(needle, ensure_ascii=False)[1:-1])
        values = func.jsonb_each_text(Instance.payload).table_valued("key", "value")
        decoded = exists(
            sa_select(1)
            .select_from(values)
            .where(values.c.value.ilike(pattern, escape=LIKE_ESCAPE))
        )
        return or_(
            Instance.external_id.ilike(pattern, escape=LIKE_ESCAPE),
            Instance.group_key.ilike(pattern, escape=LIKE_ESCAPE),
            and_(cast(Instance.payload, Text).ilike(raw, escape=LIKE_ESCAPE), decoded),
        )
    # SQLite stores payloads as written by json.dumps (ASCII-only escapes); its LIKE already
    # ignores ASCII case.
    raw = like_pattern(json.dumps(needle)[1:-1])
    values = func.json_each(Instance.payload).table_valued("key", "value")
    decoded = exists(
        sa_select(1).select_from(values).where(values.c.value.like(pattern, escape=LIKE_ESCAPE))
    )
    return or_(
        Instance.external_id.like(pattern, escape=LIKE_ESCAPE),
        Instance.group_key.like(pattern, escape=LIKE_ESCAPE),
        and_(cast(Instance.payload, Text).like(raw, escape=LIKE_ESCAPE), decoded),
    )
