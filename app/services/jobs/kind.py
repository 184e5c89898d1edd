"""What every job kind declares: its name, typed parameters, description and result links.

A job kind is one module of this package holding one :class:`JobParams` subclass decorated
with :func:`job_kind` (:mod:`app.services.jobs.kinds` imports every module, so each registers
itself, as disagreement modes do). The web form, the API and the CLI build the class before
anything is queued, so a bad value is an :class:`~app.errors.InvalidInput` naming its field and
nothing is queued; the worker's handler reads the same class back from the job row.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any, ClassVar, Literal, Self, TypeVar

from sqlalchemy.orm import Session

from app.errors import InvalidInput
from app.services.jobs import queue as job_queue
from app.services.table.instance_filter import InstanceFilter
from app.tables import Job

_KINDS: dict[str, type[JobParams]] = {}
P = TypeVar("P", bound="type[JobParams]")
J = TypeVar("J", bound="JobParams")


LinkPage = Literal["table", "metrics", "probes", "queue"]


@dataclass(frozen=True)
class JobLink:
    """One link of a finished job's page: its text and the page it opens (the web builds URLs).

    ``table`` is the instance table's filter (page ``table``); ``query`` the query of another
    page of the benchmark (``metrics``); ``queue_id`` the review queue (page ``queue``).
    """

    text: str
    page: LinkPage
    benchmark: str | None = None
    table: InstanceFilter | None = None
    query: tuple[tuple[str, str], ...] = ()
    queue_id: int | None = None


@dataclass(frozen=True)
class JobParams:
    """The parameters of a job kind: frozen, checked when built, JSON-able.

    Subclasses are dataclasses that set :attr:`kind` and :attr:`title`, check their values in
    :meth:`validate` (raising :class:`InvalidInput` with the field's name), check that what
    they name exists in :meth:`check`, and say in words what the job does in :meth:`describe`.
    """

    kind: ClassVar[str]
    title: ClassVar[str]
    # Offered to users (forms, POST /api/jobs/{kind}); False for jobs the app queues itself.
    startable: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Refuse a bad value (:class:`InvalidInput` naming the field); may normalise values."""

    def check(self, session: Session) -> None:
        """Refuse parameters naming what the store lacks (``NotFound``, ``InvalidInput``)."""

    def describe(self) -> str:
        """What the job does, in words, for the jobs pages."""
        return self.title

    def links(self, result: Mapping[str, Any]) -> list[JobLink]:
        """The pages showing what a finished job produced (``result`` is the job's result)."""
        return []

    def as_dict(self) -> dict[str, Any]:
        """JSON-able parameters, as stored on the job row."""
        return asdict(self)

    def _set(self, name: str, value: object) -> None:
        """Normalise a field while validating (the dataclass is frozen)."""
        object.__setattr__(self, name, value)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Parameters from a job row or a JSON body (unknown keys are refused).

        Raises
        ------
        InvalidInput
            For an unknown key, a missing required one, or an invalid value.

        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise InvalidInput(f"unknown {cls.kind} parameters {unknown}", field="params")
        missing = [f.name for f in fields(cls) if _required(f) and f.name not in data]
        if missing:
            raise InvalidInput("is required", field=missing[0])
        return cls(**data)

    @classmethod
    def session_defaults(cls, session: Session, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` with the defaults that depend on the store filled in (none by default)."""
        return data

    @classmethod
    def parse_form(cls, form: Mapping[str, str]) -> dict[str, Any]:
        """A submitted form's text fields as typed values, by the fields' annotations.

        Fields the form lacks are left out (they keep their defaults); a blank value of an
        optional field is None; list fields are comma-separated.

        Raises
        ------
        InvalidInput
            Naming the field whose text is not of its type.

        """
        hints = typing.get_type_hints(cls)
        return {
            f.name: _parse(f.name, hints[f.name], form[f.name])
            for f in fields(cls)
            if f.name in form
        }


def _required(f: Any) -> bool:
    return f.default is MISSING and f.default_factory is MISSING


def _parse(name: str, hint: Any, text: str) -> Any:
    """``text`` from a form as a value of type ``hint`` (one of the types parameters use)."""
    text = text.replace("\r\n", "\n")
    args = typing.get_args(hint)
    optional = type(None) in args
    if optional:
        (hint,) = [a for a in args if a is not type(None)]
        if not text.strip():
            return None
    origin = typing.get_origin(hint)
    if origin is list:
        (item,) = typing.get_args(hint)
        return [_scalar(name, item, part.strip()) for part in text.split(",") if part.strip()]
    if origin in (dict, types.UnionType):
        raise InvalidInput("cannot be set from a form", field=name)
    return _scalar(name, hint, text)


def _scalar(name: str, hint: Any, text: str) -> Any:
    if hint is bool:
        return text.strip().lower() in ("1", "true", "on", "yes")
    if hint is int:
        try:
            return int(text.strip())
        except ValueError:
            raise InvalidInput(f"{text.strip()!r} is not a whole number", field=name) from None
    if hint is float:
        try:
            return float(text.strip())
        except ValueError:
            raise InvalidInput(f"{text.strip()!r} is not a number", field=name) from None
    return text


def job_kind(cls: P) -> P:
    """Register a :class:`JobParams` subclass as the parameters of its :attr:`~JobParams.kind`."""
    if cls.kind in _KINDS and _KINDS[cls.kind] is not cls:
        raise RuntimeError(f"job kind {cls.kind!r} is declared twice")
    _KINDS[cls.kind] = cls
    return cls


def registered() -> dict[str, type[JobParams]]:
    """The kinds registered so far (see :func:`app.services.jobs.kinds.all_kinds`)."""
    return dict(_KINDS)


def create(session: Session, params_type: type[J], data: dict[str, Any]) -> J:
    """``params_type`` from ``data``, with its store-dependent defaults filled in.

    Raises
    ------
    InvalidInput
        Naming the field with a bad value (or ``params`` for an unknown key).

    """
    return params_type.from_dict(params_type.session_defaults(session, dict(data)))


def enqueue(session: Session, params: JobParams, *, max_attempts: int | None = None) -> Job:
    """Check what ``params`` names, then queue its job (flushed, never committed).

    Raises
    ------
    NotFound, InvalidInput
        From :meth:`JobParams.check`; nothing is queued.

    """
    params.check(session)
    extra = {} if max_attempts is None else {"max_attempts": max_attempts}
    return job_queue.enqueue(session, params.kind, params.as_dict(), **extra)
