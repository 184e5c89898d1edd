"""Natural sort keys of external ids (``x:2`` before ``x:10``), stored with each instance.

The key is compared as plain bytes (binary collation on both databases), so the order is the
same on SQLite and PostgreSQL and an index on the key serves the sorted table.
"""

from __future__ import annotations

import re

# Digit runs longer than this are split; each part is keyed as its own number.
_MAX_RUN = 99
_DIGITS = re.compile(r"[0-9]+")
MAX_KEY_LENGTH = 1000


def _number_key(run: str) -> str:
    # Leading zeros do not count (07 sorts as 7); the two-digit length prefix makes a longer
    # number sort after a shorter one whatever their first digits.
    digits = run.lstrip("0") or "0"
    return "".join(
        f"{len(part):02d}{part}"
        for part in (digits[i : i + _MAX_RUN] for i in range(0, len(digits), _MAX_RUN))
    )


def natural_key(external_id: str) -> str:
    """The natural sort key of ``external_id``: each ASCII digit run as a length-prefixed number.

    Text between numbers compares character by character; numbers compare by value. Ids that
    differ only in leading zeros get the same key (the instance id breaks such ties).

    >>> sorted(["x:10", "x:2", "x:1"], key=natural_key)
    ['x:1', 'x:2', 'x:10']
    """
    key = _DIGITS.sub(lambda m: _number_key(m.group()), external_id)
    return key[:MAX_KEY_LENGTH]
