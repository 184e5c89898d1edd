"""Writes the lie-detector datasets into the store as ``response`` benchmarks.

Reads the bundled statement and role-play tables, builds records with :mod:`app.ingest.lie.formats`
and writes them through the importers' one write path (idempotent, refusing contradictions),
flushing but never committing: the caller owns the transaction.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Unpack

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.ingest.finalize import finalize_import
from app.ingest.lie.formats import (
    CONFOUNDER_SETS,
    PERSONAS,
    STATEMENT_FORMATS,
    TRUTH_LABEL,
    StatementRow,
    compliance_items,
    likelihood_items,
    persona_belief_items,
    persona_items,
    roleplay_items,
    shared_persona_prefill,
    statement_chat_items,
)
from app.ingest.readers import open_table
from app.ingest.records import ImportSummary, Record, SourceFields
from app.ingest.values import label_value
from app.ingest.writer import record_import, write_records
from app.services.evidence.benchmarks import BenchmarkNotes, ensure_benchmark
from app.tables import BenchmarkKind

TRUTH_TOPICS = ("cities", "sp_en_trans", "element_symb")
TRUTH_BENCHMARK = "truth-chat"
CONFOUNDER_PREFIX = "confounder-"
PERSONA_BENCHMARK = "personas"
ROLEPLAY_BENCHMARK = "roleplay"
ROLEPLAY_FILE = Path("truth") / "real_world_scenarios" / "all_unambiguous_replies.csv"
IMPORTER = "lie-datasets"
TRUTH_LICENCE = (
    "MIT (Truth is Universal datasets, github.com/sciai-lab/Truth_is_Universal); "
    "upstream terms may also apply"
)
LABEL_NOTE = "label set 'truth': 1 = the response is factually correct (honest), 0 = it is not"
_FIELDS = SourceFields(external_id="id", group_key="group")


@dataclass(frozen=True)
class ItemBatch:
    """Records built from one source in one way; ``name`` locates messages and provenance."""

    name: str
    records: list[Record]


def read_statement_rows(path: str | os.PathLike[str]) -> list[StatementRow]:
    """The rows of a ``statement,label`` table (CSV, JSONL or Parquet) as :class:`StatementRow`.

    Raises
    ------
    InvalidInput
        For a missing file or column, a non-text statement, an empty label or one other than 0/1
        (``1.0``/``0.0`` accepted), located as ``file:line: field: reason``.

    """
    stem = Path(path).stem
    out: list[StatementRow] = []
    with open_table(path, required=("statement", "label")) as table:
        for row in table.rows():
            statement = row.text("statement")
            label = row.convert("label", lambda raw: label_value(TRUTH_LABEL, raw))
            if label is None:
                raise row.error("label", "empty label (every item needs one)")
            extra = {k: v for k, v in row.data.items() if k not in ("statement", "label")}
            out.append(StatementRow(stem, row.index, row.line, statement, label, extra))
    return out


def truth_file(data: Path, topic: str, *, negated: bool = False) -> Path:
    """``<data>/truth/[neg_]<topic>.csv``."""
    return Path(data) / "truth" / f"{'neg_' if negated else ''}{topic}.csv"


def _fingerprint(records: Iterable[Record]) -> str:
    # Generated items have no single input file: the hash of what was written is the provenance.
    digest = hashlib.sha256()
    for r in records:
        item = [r.external_id, r.group_key, r.payload, r.labels]
        digest.update(json.dumps(item, sort_keys=True, ensure_ascii=False).encode())
        digest.update(b"\n")
    return digest.hexdigest()


def write_items(
    session: Session,
    benchmark: str,
    batches: Sequence[ItemBatch],
    **notes: Unpack[BenchmarkNotes],
) -> ImportSummary:
    """Write built records into the ``response`` benchmark ``benchmark`` (created if missing).

    Each batch goes through :func:`app.ingest.writer.write_records` (identical rows are skipped,
    contradicting ones raise) and, if it added anything, gets an import record whose hash is the
    hash of its records. The data version is bumped when labels were added.

    Parameters
    ----------
    session
        The caller's session; flushed, never committed.
    benchmark
        Target benchmark name; an existing one must be of kind ``response``.
    batches
        The records to write, one batch per source.
    **notes
        ``description``, ``source`` and ``licence``, stored when the benchmark is created.

    Returns
    -------
    ImportSummary
        Counts over all batches; ``files`` are the batch names.

    Raises
    ------
    InvalidInput
        For a duplicate id within a batch or a value the store cannot hold.
    Conflict
        When an item contradicts what the store holds, or the benchmark has another kind.

    """
    target = ensure_benchmark(session, benchmark, BenchmarkKind.response, **notes)
    summary = ImportSummary()
    for batch in batches:
        counts = write_records(session, target, batch.name, batch.records, _FIELDS)
        extra = {"items": len(batch.records), "source": batch.name}
        sha = _fingerprint(batch.records)
        record_import(session, target, IMPORTER, batch.name, counts, sha256=sha, extra=extra)
        summary.add(counts)
        summary.files.append(batch.name)
    return finalize_import(session, target, summary)


def _check_names(given: Sequence[str], known: Sequence[str], what: str) -> list[str]:
    for name in given:
        if name not in known:
            raise InvalidInput(f"unknown {what} {name!r} (expected {', '.join(known)})")
    if not given:
        raise InvalidInput(f"no {what} given")
    return list(dict.fromkeys(given))


def build_truth(
    session: Session,
    data: Path,
    *,
    formats: Sequence[str] = STATEMENT_FORMATS,
    topics: Sequence[str] = TRUTH_TOPICS,
    benchmark: str = TRUTH_BENCHMARK,
) -> ImportSummary:
    """The probe training set: statements of ``topics`` as chats in ``formats``, one benchmark.

    Parameters
    ----------
    session
        The caller's session; flushed, never committed.
    data
        Folder holding ``truth/``: ``affirmative`` and ``forced_opposite`` read
        ``truth/<topic>.csv``, ``negated`` reads ``truth/neg_<topic>.csv``.
    formats
        Any of ``affirmative``, ``negated``, ``forced_opposite`` (see
        :func:`app.ingest.lie.formats.statement_chat_items`).
    topics
        Statement topics. Any topic with such files works; those in
        :data:`app.ingest.lie.formats.TOPICS` also get subject questions and subject groups.
    benchmark
        Target ``response`` benchmark.

    Returns
    -------
    ImportSummary
        Counts over one batch per (topic, format).

    Raises
    ------
    InvalidInput
        For an unknown format, a missing file or a malformed row.
    Conflict
        When an item contradicts what the benchmark holds.

    """
    formats = _check_names(formats, STATEMENT_FORMATS, "format")
    topics = list(dict.fromkeys(topics))
    if not topics:
        raise InvalidInput("no topic given")
    cache: dict[Path, list[StatementRow]] = {}
    batches = []
    for topic in topics:
        for fmt in formats:
            path = truth_file(data, topic, negated=fmt == "negated")
            if path not in cache:
                cache[path] = read_statement_rows(path)
            records = statement_chat_items(cache[path], fmt)
            batches.append(ItemBatch(f"{path.name} ({fmt})", records))
    return write_items(
        session,
        benchmark,
        batches,
        description=(
            "True and false statements as chats (formats affirmative, negated, forced_opposite); "
            f"{LABEL_NOTE}. Payload 'statement' is the bare statement for plain-text probes."
        ),
        source=f"built from {', '.join(topics)} under {Path(data) / 'truth'}",
        licence=TRUTH_LICENCE,
    )


def build_confounders(
    session: Session,
    data: Path,
    *,
    sets: Sequence[str] = CONFOUNDER_SETS,
    source: str = "cities",
    prefix: str = CONFOUNDER_PREFIX,
    compliance_n: int = 200,
    seed: int = 0,
) -> list[ImportSummary]:
    """The confounder stress tests, one benchmark each: ``<prefix><set>`` (``_`` as ``-``).

    Parameters
    ----------
    session
        The caller's session; flushed, never committed.
    data
        Folder holding ``truth/<source>.csv``.
    sets
        Any of ``likelihood``, ``persona_belief`` (two items per true statement of ``source``,
        see :func:`app.ingest.lie.formats.facts_with_wrong_answers`) and ``compliance``
        (``compliance_n`` arithmetic questions, two items each).
    source
        Statement topic with a question template: ``cities``, ``sp_en_trans``, ``element_symb``.
    prefix
        Benchmark name prefix.
    compliance_n
        Questions in the compliance set.
    seed
        Seed of every random choice (wrong answers, persona names, questions).

    Returns
    -------
    list[ImportSummary]
        One summary per set, in the order given.

    Raises
    ------
    InvalidInput
        For an unknown set or topic, a missing file or a malformed row.
    Conflict
        When an item contradicts what a benchmark holds (e.g. rebuilt with another seed).

    """
    sets = _check_names(sets, CONFOUNDER_SETS, "confounder set")
    rows: list[StatementRow] | None = None
    path = truth_file(data, source)
    summaries = []
    for name in sets:
        if name == "compliance":
            batch = ItemBatch(f"arithmetic (seed {seed})", compliance_items(compliance_n, seed))
            origin, licence = "generated arithmetic and letter-counting questions", ""
        else:
            if rows is None:
                rows = read_statement_rows(path)
            build = likelihood_items if name == "likelihood" else persona_belief_items
            batch = ItemBatch(f"{path.name} ({name}, seed {seed})", build(rows, seed))
            origin, licence = f"built from {path.name}", TRUTH_LICENCE
        summaries.append(
            write_items(
                session,
                prefix + name.replace("_", "-"),
                [batch],
                description=f"Lie-detector confounder set '{name}'; {LABEL_NOTE}.",
                source=origin,
                licence=licence,
            )
        )
    return summaries


def build_personas(
    session: Session, *, spp: bool = False, benchmark: str = PERSONA_BENCHMARK
) -> ImportSummary:
    """The hand-written anti-factual persona set (condition ``on-policy``), plus SPP if asked.

    Parameters
    ----------
    session
        The caller's session; flushed, never committed.
    spp
        Also write the shared-persona-prefill copies (condition ``spp``) into the same
        benchmark, so ``condition`` is a slice and each question's variants share a group.
    benchmark
        Target ``response`` benchmark.

    Returns
    -------
    ImportSummary
        Counts over the on-policy batch and, with ``spp``, the SPP batch.

    """
    on_policy = persona_items(PERSONAS)
    batches = [ItemBatch("anti-factual personas (on-policy)", on_policy)]
    if spp:
        batches.append(ItemBatch("anti-factual personas (spp)", shared_persona_prefill(on_policy)))
    return write_items(
        session,
        benchmark,
        batches,
        description=(
            "Honest answers vs anti-factual persona answers (condition on-policy: honest under the "
            f"default prompt; spp: both under the persona's prompt); {LABEL_NOTE}."
        ),
        source="hand-written for Appellate (app/ingest/lie/formats.py)",
    )


def build_roleplay(
    session: Session,
    data: Path,
    *,
    benchmark: str = ROLEPLAY_BENCHMARK,
    path: Path | None = None,
) -> ImportSummary:
    """The labelled role-play lie/honest replies as chats (see ``roleplay_items``).

    Parameters
    ----------
    session
        The caller's session; flushed, never committed.
    data
        Folder holding ``truth/real_world_scenarios/all_unambiguous_replies.csv``.
    benchmark
        Target ``response`` benchmark.
    path
        Another ``statement,label`` replies table to read instead.

    Returns
    -------
    ImportSummary
        Counts of the one batch.

    Raises
    ------
    InvalidInput
        For a missing file or a malformed row.

    """
    file = path or Path(data) / ROLEPLAY_FILE
    records = roleplay_items(read_statement_rows(file))
    return write_items(
        session,
        benchmark,
        [ItemBatch(Path(file).name, records)],
        description=f"Role-play scenarios with an honest or deceptive reply; {LABEL_NOTE}.",
        source=f"built from {Path(file).name}",
        licence=TRUTH_LICENCE,
    )
