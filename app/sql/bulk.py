"""Fast set-based writes and lookups: Core INSERT executemany on SQLite, COPY on PostgreSQL.

SQLAlchemy's per-row parameter handling costs more than the database on large imports, so rows
are converted once with the column types' own bind processors (the stored form is exactly what
the ORM would write) and handed to the driver in bulk.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from operator import itemgetter
from typing import Any

from sqlalchemy import JSON, ColumnElement, Table, any_, bindparam, insert
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session


def is_postgresql(session: Session) -> bool:
    """Whether the session talks to PostgreSQL (COPY and array parameters are available)."""
    return session.get_bind().dialect.name == "postgresql"


def one_of(session: Session, column: ColumnElement[Any], values: Sequence[Any]) -> Any:
    """``column IN values``; one array parameter on PostgreSQL.

    psycopg parses every statement text it has not cached, and texts with thousands of
    placeholders are never cached: ``= ANY(:array)`` keeps the statement short and constant.
    """
    if is_postgresql(session):
        return column == any_(bindparam(None, list(values), type_=ARRAY(column.type)))
    return column.in_(list(values))


COPY_BLOCK_ROWS = 5000
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_SPECIAL_FLOATS = {math.inf: "Infinity", -math.inf: "-Infinity"}


def copy_text(value: Any) -> str:
    """One field in PostgreSQL's COPY text format (NULL as a backslash-N, specials escaped)."""
    if value is None:
        return "\\N"
    if isinstance(value, str):
        return value.translate(_COPY_ESCAPES)
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, float):
        return "NaN" if value != value else _SPECIAL_FLOATS.get(value, repr(value))
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value).translate(_COPY_ESCAPES)


def sqlite_literal(value: Any) -> str | None:
    """``value``, in the form the driver would bind, as an SQLite literal; None if it has none.

    Only the types whose literal is exact are written (NULL, integers, finite floats, text
    without NUL, quotes doubled as SQL escapes them); anything else stays a bound parameter.
    """
    if value is None:
        return "NULL"
    if type(value) is int:
        return str(value)
    if type(value) is float:
        return repr(value) if math.isfinite(value) else None
    if type(value) is str and "\x00" not in value:
        return "'" + value.replace("'", "''") + "'"
    return None


def bulk_insert(
    session: Session,
    table: Table,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    constants: Mapping[str, Any] | None = None,
) -> int:
    """Insert ``rows`` (tuples in ``columns`` order) plus ``constants`` in every row.

    Parameters
    ----------
    session
        The caller's session: the rows join its transaction, nothing is committed.
    table
        The Core table.
    columns
        Names of the columns that vary per row, in tuple order.
    rows
        One tuple of Python values per row.
    constants
        Column values shared by every row (converted once).

    Returns
    -------
    int
        The number of rows written.

    """
    conn = session.connection()
    dialect = conn.dialect
    constants = dict(constants or {})
    names = [*columns, *constants]

    copy = dialect.name == "postgresql" and dialect.driver == "psycopg"

    def processor(name: str) -> Any:
        column_type = table.c[name].type
        if copy and isinstance(column_type, JSON):
            # COPY takes JSON as text; psycopg's own JSONB dumper would re-encode every value.
            return json.dumps
        return column_type.dialect_impl(dialect).bind_processor(dialect)

    convert = [(i, p) for i, name in enumerate(columns) if (p := processor(name)) is not None]
    # Empty JSON details ({}) are the common value of whole columns: encode them once.
    empty = {i: p({}) for i, p in convert if isinstance(table.c[columns[i]].type, JSON)}
    fixed = tuple(
        value if (p := processor(name)) is None or value is None else p(value)
        for name, value in constants.items()
    )
    if copy:
        quote = dialect.identifier_preparer
        sql = (
            f"COPY {quote.format_table(table)} ({', '.join(quote.quote(n) for n in names)}) "
            "FROM STDIN"
        )
        order = list(range(len(names)))
    else:
        compiled = insert(table).compile(dialect=dialect, column_keys=names)
        sql = str(compiled)
        keys = compiled.positiontup or names
        order = [names.index(key) for key in keys]
    # One C-level call puts each row's values into the statement's column order.
    arrange = itemgetter(*order) if order != list(range(len(names))) else tuple

    def processed(row: Sequence[Any]) -> Sequence[Any]:
        if convert:
            row = list(row)
            for i, process in convert:
                value = row[i]
                if value is not None:
                    row[i] = empty[i] if i in empty and value == {} else process(value)
        return row

    def converted(row: Sequence[Any]) -> tuple[Any, ...]:
        return arrange((*processed(row), *fixed))

    if copy:
        count = 0
        cursor = conn.connection.cursor()
        # Rows go as COPY text, formatted here and written in blocks: psycopg's write_row
        # costs more per row than the server's work on it. The constants come last in COPY's
        # column order, formatted once.
        suffix = "".join("\t" + copy_text(value) for value in fixed)
        block: list[str] = []
        try:
            with cursor.copy(sql) as stream:
                for row in rows:
                    block.append("\t".join(map(copy_text, processed(row))) + suffix)
                    count += 1
                    if len(block) >= COPY_BLOCK_ROWS:
                        stream.write("\n".join(block) + "\n")
                        block.clear()
                if block:
                    stream.write("\n".join(block) + "\n")
        finally:
            cursor.close()
        return count
    literals = [sqlite_literal(value) for value in fixed] if dialect.name == "sqlite" else None
    if literals is not None and None not in literals:
        # The constants go into the statement as literals: SQLite then binds only what varies
        # per row (a quarter less insert time for a prediction row), and rows that need no
        # conversion are handed over as they are.
        quote = dialect.identifier_preparer
        sql = (
            f"INSERT INTO {quote.format_table(table)} ({', '.join(map(quote.quote, names))}) "
            f"VALUES ({', '.join(['?'] * len(columns) + literals)})"  # type: ignore[operator]
        )
        if convert:
            batch = [tuple(processed(row)) for row in rows]
        else:  # the driver takes tuples; the writer's rows are tuples already
            batch = [row if type(row) is tuple else tuple(row) for row in rows]
        if batch:
            conn.exec_driver_sql(sql, batch)
        return len(batch)
    batch = [converted(row) for row in rows]
    if batch:
        if compiled.positiontup is None:
            batch = [dict(zip(names, values, strict=True)) for values in batch]
        conn.exec_driver_sql(sql, batch)
    return len(batch)
