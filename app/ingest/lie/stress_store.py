"""Built stress sets kept in the data directory, so every card of one model scores the same items.

A report card builds its five stress tests with the model under test (minutes on a CPU, and
the persona answers are sampled): the cards of several recipes side by side must score the
same items, as the paper's table does, and need not build them again. A kept build is named by
everything it depends on: the weights, the server that generated the persona answers, the sizes,
the personas, the seed, and the source of the modules that build sets (an edit builds anew).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from app.files import write_text_atomically
from app.ingest.lie import stress
from app.ingest.lie.stress import StressSet
from app.ingest.records import Record

FOLDER = "stress-sets"
# The code that decides what a build holds: its text is part of the name of a kept build.
_BUILDERS = (Path(stress.__file__),)


def build_key(what: Mapping[str, Any]) -> str:
    """The name of the build of ``what`` (weights, server, sizes, personas, seed), code included."""
    code = hashlib.sha256(b"".join(p.read_bytes() for p in _BUILDERS)).hexdigest()
    text = json.dumps({**what, "code": code}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _to_json(sets: Sequence[StressSet]) -> str:
    return json.dumps(
        [
            {
                "name": s.name,
                "considered": s.considered,
                "rejections": dict(s.rejections),
                "verification": s.verification,
                "records": [
                    [r.line, r.external_id, r.group_key, r.payload, r.labels] for r in s.records
                ],
            }
            for s in sets
        ]
    )


def _from_json(text: str) -> list[StressSet]:
    return [
        StressSet(
            name=s["name"],
            records=[Record(*fields) for fields in s["records"]],
            rejections=Counter(s["rejections"]),
            verification=s["verification"],
            considered=s["considered"],
        )
        for s in json.loads(text)
    ]


def kept_stress_sets(
    data_dir: Path, what: Mapping[str, Any], build: Callable[[], list[StressSet]]
) -> tuple[list[StressSet], bool]:
    """The stress sets of ``what``: kept from an earlier build, else built now and kept.

    Returns
    -------
    tuple of (list of StressSet, bool)
        The sets, and whether they were read from an earlier build.

    """
    path = data_dir / FOLDER / f"{build_key(what)}.json"
    if path.exists():
        return _from_json(path.read_text(encoding="utf-8")), True
    sets = build()
    write_text_atomically(path, _to_json(sets))
    return sets, False
