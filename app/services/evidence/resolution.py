"""Resolved labels: a label set's original value, annotators' votes and reviewers' adjudication.

Derived from the append-only history in one query per label set (or chunk), never per instance.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import Select, case, func, literal, select, type_coerce
from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.evidence.labels import ADJUDICATION, REVIEW_SOURCES, VOTE, is_original
from app.services.evidence.labels import label_names as benchmark_label_names
from app.tables import Instance, LabelEvent, as_utc

# The review sources are defined in labels, beside the current-label readers that must skip
# them, and re-exported here, where review is resolved.
__all__ = [
    "ADJUDICATION",
    "CHANGE_COLUMNS",
    "REVIEW_SOURCES",
    "VOTE",
    "ChangeRow",
    "Event",
    "Resolution",
    "Rule",
    "change_rows",
    "changelog",
    "check_k",
    "fold",
    "latest_events",
    "resolve",
    "resolved_labels",
]

Rule = Literal["adjudication", "unanimous-votes", "original"]

# The kind of an event for "latest per kind": votes additionally keep one per author.
_KIND = case((is_original(), literal("original")), else_=LabelEvent.source)
_VOTER = case((LabelEvent.source == VOTE, LabelEvent.author), else_=literal(""))
# Only review events' tags reach the changelog; skipping the others saves decoding a JSON
# list per instance (a third of the time on 100,000 instances).
_REVIEW_TAGS = type_coerce(case((is_original(), None), else_=LabelEvent.tags), LabelEvent.tags.type)


@dataclass(frozen=True, slots=True)
class Event:
    """One label event as resolution reads it (a plain value, detached from any session).

    ``tags`` are read for votes and adjudications only (empty for other sources).
    """

    id: int
    source: str
    value: str | None
    author: str
    reason: str
    tags: tuple[str, ...]
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Resolution:
    """The original and resolved value of one (instance, label set), and why.

    ``votes`` maps each author whose latest vote is not a withdrawal to that vote's value;
    ``vote_events`` are the authors' latest vote events, withdrawals included. ``deciding``
    holds the events that decided ``resolved``: the adjudication, or the agreeing votes (empty
    when the rule is ``original``).
    """

    original: str | None
    resolved: str | None
    rule: Rule
    votes: dict[str, str] = field(default_factory=dict)
    adjudication: Event | None = None
    original_event: Event | None = None
    vote_events: tuple[Event, ...] = ()
    deciding: tuple[Event, ...] = ()

    @property
    def changed(self) -> bool:
        """Whether review changed the value (the row belongs in the changelog)."""
        return self.resolved != self.original


@dataclass(frozen=True, slots=True)
class ChangeRow:
    """One changelog line: an (instance, label set) whose resolved value is not the original.

    ``authors`` and ``reasons`` are aligned, one entry per deciding event; ``tags`` is their
    sorted union; ``decided_at`` is the time of the latest deciding event.
    """

    external_id: str
    label: str
    original: str | None
    resolved: str | None
    rule: Rule
    authors: tuple[str, ...]
    reasons: tuple[str, ...]
    tags: tuple[str, ...]
    decided_at: datetime | None


CHANGE_COLUMNS: tuple[str, ...] = (
    "external_id",
    "label",
    "original",
    "resolved",
    "rule",
    "authors",
    "reasons",
    "tags",
    "decided_at",
)


def check_k(k: int) -> int:
    """``k`` if it is a usable quorum of agreeing voters (at least 1), else InvalidInput."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidInput(f"k must be a whole number >= 1, got {k!r}", field="k")
    return k


def resolve(
    original: Event | None,
    votes: Iterable[Event],
    adjudication: Event | None,
    k: int,
) -> Resolution:
    """Fold the latest original event, latest vote per author and latest adjudication.

    Parameters
    ----------
    original : Event or None
        The latest event from a source other than ``vote`` and ``adjudication``.
    votes : iterable of Event
        The latest ``vote`` event of each author (a null value withdraws that author's vote).
    adjudication : Event or None
        The latest ``adjudication`` event (a null value means "no label").
    k : int
        Agreeing authors needed for votes to override the original.

    Returns
    -------
    Resolution

    """
    vote_events = tuple(sorted(votes, key=lambda e: e.id))
    # A null vote withdraws the author's vote: it neither counts towards k nor blocks agreement.
    counted = [e for e in vote_events if e.value is not None]
    by_author = {e.author: e.value for e in counted if e.value is not None}
    orig = original.value if original is not None else None
    resolved = orig
    rule: Rule = "original"
    deciding: tuple[Event, ...] = ()
    if adjudication is not None:
        resolved, rule, deciding = adjudication.value, "adjudication", (adjudication,)
    elif len(by_author) >= k and len(set(by_author.values())) == 1:
        resolved, rule, deciding = counted[0].value, "unanimous-votes", tuple(counted)
    return Resolution(
        original=orig,
        resolved=resolved,
        rule=rule,
        votes=by_author,
        adjudication=adjudication,
        original_event=original,
        vote_events=vote_events,
        deciding=deciding,
    )


def resolved_labels(
    session: Session, benchmark_id: int, label_name: str, *, k: int = 2
) -> dict[int, Resolution]:
    """The resolution of label set ``label_name`` for every instance of a benchmark.

    Resolved is the latest adjudication if there is one (a null value: no label), else the
    common value of the authors' latest votes when at least ``k`` authors vote and all agree,
    else the original (the latest event of any other source; null after a retraction).
    "Latest" is the highest event id, as everywhere else in the label history.

    Parameters
    ----------
    session : Session
        An open session; nothing is written.
    benchmark_id : int
        The benchmark.
    label_name : str
        The label set.
    k : int
        Agreeing voters needed for votes to override the original (at least 1).

    Returns
    -------
    dict of int to Resolution
        Keyed by instance id; instances with no event of ``label_name`` are absent.

    Raises
    ------
    InvalidInput
        ``k`` below 1.

    """
    check_k(k)
    in_benchmark = select(Instance.id).where(Instance.benchmark_id == benchmark_id)
    rows = latest_events(session, in_benchmark, [label_name])
    return {iid: res for (iid, _name), (_ext, res) in fold(rows, k).items()}


def resolved_values(
    session: Session, benchmark_id: int, label_name: str, *, k: int = 2
) -> dict[int, str]:
    """``{instance id: resolved value}`` of a label set, instances resolved to no label left out.

    See :func:`resolved_labels` for the rule and the errors.
    """
    resolutions = resolved_labels(session, benchmark_id, label_name, k=k)
    return {iid: r.resolved for iid, r in resolutions.items() if r.resolved is not None}


def changelog(
    session: Session,
    benchmark_id: int,
    label_names: Sequence[str] | None = None,
    k: int = 2,
) -> list[ChangeRow]:
    """Every (instance, label set) of a benchmark whose resolved value differs from the original.

    Parameters
    ----------
    session : Session
        An open session; nothing is written.
    benchmark_id : int
        The benchmark.
    label_names : sequence of str, optional
        Label sets to include (default: every label set the benchmark uses).
    k : int
        Agreeing voters needed for votes to override the original (at least 1).

    Returns
    -------
    list of ChangeRow
        Sorted by label set, then external id.

    Raises
    ------
    InvalidInput
        ``k`` below 1.

    """
    check_k(k)
    names = list(label_names) if label_names is not None else None
    if names is None:
        names = benchmark_label_names(session, benchmark_id)
    in_benchmark = select(Instance.id).where(Instance.benchmark_id == benchmark_id)
    out: list[ChangeRow] = []
    # One query per label set bounds what is held at once to one set's latest events.
    for name in names:
        resolutions = fold(latest_events(session, in_benchmark, [name]), k)
        out += change_rows(resolutions)
    out.sort(key=lambda r: (r.label, r.external_id))
    return out


def change_rows(resolutions: dict[tuple[int, str], tuple[str, Resolution]]) -> list[ChangeRow]:
    """The changelog rows of folded resolutions (see :func:`fold`), in no particular order."""
    rows = []
    for (_iid, name), (external_id, res) in resolutions.items():
        if not res.changed:
            continue
        deciding = res.deciding
        tags = sorted({str(t) for e in deciding for t in e.tags})
        rows.append(
            ChangeRow(
                external_id=external_id,
                label=name,
                original=res.original,
                resolved=res.resolved,
                rule=res.rule,
                authors=tuple(e.author for e in deciding),
                reasons=tuple(e.reason for e in deciding),
                tags=tuple(tags),
                decided_at=max((e.created_at for e in deciding), default=None),
            )
        )
    return rows


def latest_events(
    session: Session, instance_ids: Sequence[int] | Select[Any], names: Sequence[str]
) -> Iterator[tuple[int, str, str, Event]]:
    """The events resolution needs, as ``(instance id, external id, label name, event)``.

    Per (instance, label set): the latest original event, the latest vote of each author and
    the latest adjudication, in one statement (a grouped ``max(id)`` and a lookup by id).

    Parameters
    ----------
    session : Session
        An open session.
    instance_ids : sequence of int or Select
        The instances: a chunk of ids (keep it to a few thousand) or a subquery of ids.
    names : sequence of str
        Label sets to read.

    """
    if not names or (not isinstance(instance_ids, Select) and not instance_ids):
        return
    ids = instance_ids if isinstance(instance_ids, Select) else list(instance_ids)
    latest = (
        select(func.max(LabelEvent.id))
        .where(LabelEvent.instance_id.in_(ids), LabelEvent.label_name.in_(list(names)))
        .group_by(LabelEvent.instance_id, LabelEvent.label_name, _KIND, _VOTER)
    )
    q = (
        select(
            LabelEvent.instance_id,
            Instance.external_id,
            LabelEvent.label_name,
            LabelEvent.id,
            LabelEvent.source,
            LabelEvent.value,
            LabelEvent.author,
            LabelEvent.reason,
            _REVIEW_TAGS,
            LabelEvent.created_at,
        )
        .join(Instance, Instance.id == LabelEvent.instance_id)
        .where(LabelEvent.id.in_(latest))
    )
    # Core rows, not ORM ones: the ORM result machinery doubled the cost of this loop.
    for (
        iid,
        ext,
        name,
        eid,
        source,
        value,
        author,
        reason,
        tags,
        created,
    ) in session.connection().execute(q):
        event = Event(
            id=eid,
            source=source,
            value=value,
            author=author or "",
            reason=reason or "",
            tags=tuple(str(t) for t in tags or ()),
            created_at=as_utc(created),
        )
        yield iid, ext, name, event


def fold(
    rows: Iterable[tuple[int, str, str, Event]], k: int
) -> dict[tuple[int, str], tuple[str, Resolution]]:
    """Resolve the rows of :func:`latest_events`: ``{(instance id, label): (external id, res)}``."""
    grouped: dict[tuple[int, str], tuple[str, list[Event]]] = {}
    for iid, ext, name, event in rows:
        grouped.setdefault((iid, name), (ext, []))[1].append(event)
    out: dict[tuple[int, str], tuple[str, Resolution]] = {}
    for key, (ext, events) in grouped.items():
        if len(events) == 1 and events[0].source not in REVIEW_SOURCES:
            # Most instances were never reviewed: no votes to sort or count.
            only = events[0]
            out[key] = (
                ext,
                Resolution(
                    original=only.value, resolved=only.value, rule="original", original_event=only
                ),
            )
            continue
        original = adjudication = None
        votes = []
        for e in events:
            if e.source == VOTE:
                votes.append(e)
            elif e.source == ADJUDICATION:
                adjudication = e
            else:
                original = e
        out[key] = (ext, resolve(original, votes, adjudication, k))
    return out
