"""Writes the hostile import files too big or too binary to commit (run by the corpus test).

``python -m tests.ingest.hostile.generate DIR`` writes them into DIR; :func:`write_generated` is
what the test calls. Each file is deterministic, so a failure reproduces byte for byte.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

ROWS = 30
ROW_GROUP_ROWS = 10


def _table(text: pa.Array | None = None) -> pa.Table:
    return pa.table(
        {
            "id": [str(i) for i in range(1, ROWS + 1)],
            "text": text if text is not None else [f"text {i} " * 3 for i in range(ROWS)],
            "truth": ["1", "0"] * (ROWS // 2),
            "p": [i / ROWS for i in range(ROWS)],
        }
    )


def deep_100k(path: Path) -> None:
    """A record whose ``meta`` is a list nested 100,000 deep (past json.loads' recursion)."""
    depth = 100_000
    path.write_text('{"id": "1", "meta": ' + "[" * depth + "]" * depth + "}\n", encoding="ascii")


def corrupt_page(path: Path) -> None:
    """Three row groups; the second one's first data page header is overwritten, footer intact."""
    pq.write_table(_table(), path, row_group_size=ROW_GROUP_ROWS, compression="none")
    page = pq.ParquetFile(path).metadata.row_group(1).column(1)
    offset = page.dictionary_page_offset or page.data_page_offset
    data = bytearray(path.read_bytes())
    data[offset : offset + 8] = b"\xff" * 8
    path.write_bytes(bytes(data))


def _strings(values: list[bytes]) -> pa.Array:
    # Arrow's own constructors validate UTF-8; raw buffers let a writer store any bytes.
    offsets = [0]
    for value in values:
        offsets.append(offsets[-1] + len(value))
    return pa.Array.from_buffers(
        pa.string(),
        len(values),
        [None, pa.array(offsets, pa.int32()).buffers()[1], pa.py_buffer(b"".join(values))],
    )


def bad_utf8_string(path: Path) -> None:
    """Row 12's ``text`` holds an encoded surrogate (CESU-8 bytes), which is not UTF-8."""
    values = [f"text {i}".encode() for i in range(ROWS)]
    values[11] = b"q\xed\xa0\x80"
    pq.write_table(_table(_strings(values)), path, row_group_size=ROW_GROUP_ROWS)


def nul_in_string(path: Path) -> None:
    """Row 25's ``text`` holds a NUL character (valid UTF-8, which PostgreSQL cannot store)."""
    values = [f"text {i}" for i in range(ROWS)]
    values[24] = "a\x00b"
    pq.write_table(_table(pa.array(values)), path, row_group_size=ROW_GROUP_ROWS)


def deep_type(path: Path) -> None:
    """A ``meta`` column of lists nested 150 deep (its values would be as deep)."""
    value: object = 1
    kind = pa.int64()
    for _ in range(150):
        value, kind = [value], pa.list_(kind)
    table = _table().slice(0, 1).append_column("meta", pa.array([value], type=kind))
    pq.write_table(table, path)


GENERATED: dict[str, Callable[[Path], None]] = {
    "deep_100k.jsonl": deep_100k,
    "corrupt_page.parquet": corrupt_page,
    "bad_utf8_string.parquet": bad_utf8_string,
    "nul_in_string.parquet": nul_in_string,
    "deep_type.parquet": deep_type,
}


def write_generated(directory: Path) -> dict[str, Path]:
    """Write every generated file into ``directory``; returns ``{name: path}``."""
    paths = {}
    for name, write in GENERATED.items():
        paths[name] = directory / name
        write(paths[name])
    return paths


if __name__ == "__main__":
    write_generated(Path(sys.argv[1]))
