"""The upstream report: a benchmark's label errors found in review, in Markdown for its tracker.

Counts by error type, models' accuracy before and after with intervals, and each item's evidence.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.ingest.export.error_types import ERROR_TYPES
from app.services.evidence.answer_matrix import LETTERS, AnswerMatrix, load_answers
from app.services.evidence.detectors import RANKER_PREFIX
from app.services.metrics.answer_changes import accuracy_changes
from app.sql.bulk import one_of
from app.stats.bootstrap import Estimate
from app.tables import Detector, Score

if TYPE_CHECKING:
    from app.ingest.export.errata import Errata, Erratum

__all__ = ["upstream_report"]

# Characters Markdown would read as markup inside a line of text.
_MARKUP = str.maketrans({c: f"\\{c}" for c in "\\`*_[]<>|~#"})


def _md(text: str) -> str:
    """``text`` as one line of Markdown that shows as written (markup escaped, lines joined)."""
    return " ".join(text.split()).translate(_MARKUP)


def _quote(text: str) -> str:
    """``text`` as a Markdown block quote, its lines kept."""
    return "\n".join(f"> {_md(line)}".rstrip() for line in text.strip().splitlines() or [""])


def _estimate(est: Estimate | None, signed: bool = False) -> str:
    if est is None or est.value is None:
        return "—"
    fmt = "{:+.3f}" if signed else "{:.3f}"
    ci = "" if est.ci is None else " [" + ", ".join(fmt.format(v) for v in est.ci) + "]"
    return fmt.format(est.value) + ci


def _ranker_scores(session: Session, ids: list[int]) -> dict[int, list[tuple[str, float]]]:
    out: dict[int, list[tuple[str, float]]] = defaultdict(list)
    if not ids:
        return out
    q = (
        select(Score.instance_id, Detector.name, Score.score)
        .join(Detector, Detector.id == Score.detector_id)
        .where(Detector.name.startswith(RANKER_PREFIX), one_of(session, Score.instance_id, ids))
        .order_by(Detector.name)
    )
    for iid, name, score in session.execute(q):
        out[iid].append((name, float(score)))
    return out


def _label_text(value: str | None) -> str:
    return "no label" if value is None else value


def _item_section(
    number: int,
    item: Erratum,
    row: int | None,
    matrix: AnswerMatrix,
    rankers: list[tuple[str, float]],
) -> list[str]:
    res = item.resolution
    change = (
        f"{_label_text(item.original)} → {_label_text(item.resolved)}"
        if res.changed
        else f"{_label_text(item.original)} kept"
    )
    lines = [f"### {number}. `{item.external_id}`: {item.error_type} ({change})", ""]
    lines += [_quote(item.question), ""]
    chosen: dict[str, list[str]] = defaultdict(list)
    off: list[str] = []
    if row is not None:
        for model, answer in zip(matrix.models, matrix.answers[row], strict=True):
            if answer is None:
                continue
            (chosen[answer] if answer in LETTERS[: len(item.options)] else off).append(model)
    for letter, text in zip(LETTERS, item.options, strict=False):
        marks = []
        if letter == item.original:
            marks.append("original label")
        if letter == item.resolved and res.changed:
            marks.append("corrected label")
        mark = f" ← {', '.join(marks)}" if marks else ""
        who = chosen.get(letter, [])
        names = ", ".join(_md(m) for m in who)
        models = f" ({len(who)} model{'s' * (len(who) != 1)}: {names})" if who else ""
        lines.append(f"- **{letter}.** {_md(text)}{mark}{models}")
    if off:
        lines.append(f"- answers naming no option: {len(off)} ({', '.join(map(_md, off))})")
    lines.append("")
    if row is not None:
        answered = sum(len(v) for v in chosen.values()) + len(off)
        lines.append(f"Models' answers: {answered} of {len(matrix.models)} models answered.")
    if rankers:
        shown = ", ".join(f"`{name}` {score:.3f}" for name, score in rankers)
        lines.append(f"Label-error rankers (higher: more likely wrong): {shown}.")
    if res.votes:
        votes = ", ".join(f"{_md(author)}: {_md(value)}" for author, value in res.votes.items())
        lines.append(f"Votes: {votes}.")
    tags = sorted({tag for event in res.deciding for tag in event.tags})
    tagged = f" (tags: {', '.join(tags)})" if tags else ""
    if res.adjudication is not None and res.rule == "adjudication":
        event = res.adjudication
        reason = f': "{_md(event.reason)}"' if event.reason else ""
        lines.append(
            f"Adjudicated {_md(_label_text(event.value))} by {_md(event.author)} on "
            f"{event.created_at.date().isoformat()}{reason}{tagged}."
        )
    else:
        reasons = "; ".join(f'{_md(e.author)}: "{_md(e.reason)}"' for e in res.deciding if e.reason)
        lines.append(
            f"Decided by {len(res.deciding)} unanimous votes"
            f"{f' ({reasons})' if reasons else ''}{tagged}."
        )
    return [*lines, ""]


def upstream_report(session: Session, errata: Errata, *, resamples: int, seed: int) -> str:
    """The Markdown report of ``errata`` for the benchmark's issue tracker.

    Parameters
    ----------
    session
        A session (read only).
    errata
        The decided items (:func:`app.ingest.export.errata.collect_errata`).
    resamples, seed
        Group-bootstrap resamples and root seed of the accuracy intervals.

    """
    bench = errata.benchmark
    matrix = load_answers(session, bench)
    row_of = {int(iid): i for i, iid in enumerate(matrix.instance_ids)}
    decided = {item.instance_id: item.resolved for item in errata.items}
    corrected = [
        decided.get(int(iid), label)
        for iid, label in zip(matrix.instance_ids, matrix.labels, strict=True)
    ]
    counts = Counter(item.error_type for item in errata.items)
    changed = sum(item.resolution.changed for item in errata.items)
    today = datetime.now(UTC).date().isoformat()
    lines = [
        f"# {_md(bench.name)}: label errors found in review",
        "",
        f"{len(errata.items)} item(s) decided in review ({_md(errata.scope)}), {changed} with a "
        f"changed label; exported by Appellate on {today}. The corrections are in the CSV "
        "files beside this report, in the MMLU-Redux errata schema (`error_type`, "
        "`correct_answer`, `potential_reason`).",
        "",
    ]
    if bench.source:
        lines += [f"Benchmark source: {_md(bench.source)}. Licence: {_md(bench.licence)}.", ""]
    lines += ["## Error types", "", "| error_type | items |", "|---|---:|"]
    lines += [f"| {kind} | {counts[kind]} |" for kind in ERROR_TYPES if counts[kind]]
    lines += ["", "## Models' accuracy before and after the corrections", ""]
    if matrix.models:
        lines += [
            "Accuracy against the original labels and against the labels with these "
            "corrections applied (an item corrected to no single correct option leaves the "
            f"corrected side), with 95% percentile intervals from {resamples} group-bootstrap "
            f"resamples (group = the item's group key, seed {seed}). Δ is the paired change on "
            "the items labelled on both sides.",
            "",
            "| model | original (n) | corrected (n) | Δ (n) |",
            "|---|---:|---:|---:|",
        ]
        after = replace(matrix, labels=list(corrected))
        for c in accuracy_changes(matrix, after, resamples=resamples, seed=seed):
            lines.append(
                f"| {_md(c.model)} | {_estimate(c.original)} ({c.n_original}) | "
                f"{_estimate(c.corrected)} ({c.n_corrected}) | "
                f"{_estimate(c.change, signed=True)} ({c.n_both}) |"
            )
    else:
        lines.append("No model answers are stored for this benchmark.")
    lines += ["", "## Items", ""]
    rankers = _ranker_scores(session, [item.instance_id for item in errata.items])
    for number, item in enumerate(errata.items, 1):
        row = row_of.get(item.instance_id)
        lines += _item_section(number, item, row, matrix, rankers.get(item.instance_id, []))
    return "\n".join(lines).rstrip() + "\n"
