"""Normalising raw cell values into ids, label values, scores and JSON payload values."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import decimal
import math
from typing import Any

from app.services.evidence.flips import FLIP_PREFIX
from app.sql.storable import MAX_LABEL_LENGTH

# Label sets with a fixed vocabulary; any other label set takes free text.
LABEL_VALUES: dict[str, tuple[str, ...]] = {"truth": ("0", "1"), "reference": ("A", "B")}
MAX_ID_LENGTH = 300
# A model's free-text answer; long outputs belong in a response benchmark.
MAX_ANSWER_LENGTH = 100_000


def check_label_name(name: str) -> None:
    """Refuse label set names an importer may not write.

    Raises
    ------
    ValueError
        For an empty or over-long name, or a derived ``flip:*`` label set.

    """
    if not name or len(name) > MAX_LABEL_LENGTH:
        raise ValueError(f"a label set name needs 1 to {MAX_LABEL_LENGTH} characters")
    if name.startswith(FLIP_PREFIX):
        raise ValueError(f"{FLIP_PREFIX}* label sets are derived from judgments, not imported")


def _number_text(value: float) -> str:
    # 1.0 and 1 are the same label; spreadsheets and pandas write integers as floats.
    return str(int(value)) if math.isfinite(value) and value == int(value) else repr(value)


def identifier(value: Any) -> str:
    """An external id or group key from a string or an integer.

    Raises
    ------
    ValueError
        For empty, over-long or non-scalar values.

    """
    if type(value) is str and 0 < len(value) <= MAX_ID_LENGTH and not value.isspace():
        return value  # the common case, first
    if isinstance(value, bool) or value is None:
        raise ValueError(f"expected a string or an integer, got {value!r}")
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise ValueError(f"expected a string or an integer, got {value!r}")
        text = str(int(value))
    elif isinstance(value, str):
        text = value
    else:
        raise ValueError(f"expected a string or an integer, got {type(value).__name__}")
    if not text.strip():
        raise ValueError("empty value")
    if len(text) > MAX_ID_LENGTH:
        raise ValueError(f"longer than {MAX_ID_LENGTH} characters")
    return text


def label_value(name: str, value: Any) -> str | None:
    """The stored text of a label, or None when the cell is empty (the item stays unlabelled).

    ``truth`` takes 0/1 (also 0.0/1.0, true/false as JSON booleans) and ``reference`` takes A/B;
    other label sets take any short text.

    Raises
    ------
    ValueError
        For a value outside the label set's vocabulary or an over-long one.

    """
    allowed = LABEL_VALUES.get(name)
    if type(value) is str and allowed is not None and value in allowed:
        return value  # the common case, first
    if value is None:
        return None
    if isinstance(value, bool):
        text = "1" if value else "0"
    elif isinstance(value, int | float):
        text = _number_text(float(value))
    elif isinstance(value, str):
        text = value.strip()
        if not text:
            return None
    else:
        raise ValueError(f"expected a string or a number, got {type(value).__name__}")
    if allowed is not None and text not in allowed:
        # "1.0" is how a float column writes the label 1.
        with contextlib.suppress(ValueError):
            text = _number_text(float(text))
        if text not in allowed:
            raise ValueError(f"expected one of {', '.join(allowed)}; got {value!r}")
    if len(text) > MAX_LABEL_LENGTH:
        raise ValueError(f"longer than {MAX_LABEL_LENGTH} characters")
    return text


def answer_text(value: Any, max_length: int = MAX_ANSWER_LENGTH) -> str | None:
    """A free-text answer (a model's, or a reference), or None for an empty cell.

    Numbers are written as text (``1.0`` as ``"1"``, as spreadsheets write integers).

    Raises
    ------
    ValueError
        For values that are not text or numbers, and text over ``max_length`` characters.

    """
    if type(value) is str and 0 < len(value) <= max_length and value == value.strip():
        return value  # the common case, first
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"expected text or a number, got {type(value).__name__}")
    text = value.strip() if isinstance(value, str) else _number_text(float(value))
    if not text:
        return None
    if len(text) > max_length:
        raise ValueError(f"longer than {max_length} characters")
    return text


def score_value(value: Any) -> float | None:
    """A finite float score, or None for an empty cell.

    Raises
    ------
    ValueError
        For text that is not a number, booleans, NaN and infinities.

    """
    if type(value) is float and math.isfinite(value):
        return value
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    try:
        score = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"expected a number, got {value!r}") from None
    if not math.isfinite(score):
        raise ValueError(f"expected a finite number, got {value!r}")
    return score


def json_value(value: Any) -> Any:
    """``value`` as plain JSON data (Parquet cells can be dates, decimals or bytes)."""
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        # JSON has no NaN; PostgreSQL's JSONB refuses it outright.
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(v) for v in value]
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    return str(value)
