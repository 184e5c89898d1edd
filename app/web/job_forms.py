"""Starting jobs from forms and the API: one path from submitted values to a queued job.

A form's text fields are parsed by the job kind's parameters class
(:meth:`~app.services.jobs.kind.JobParams.parse_form`) and the class is built before anything
is queued; a bad value re-renders the form with a 422 and the reason beside the field it names.
The API builds the same class from a JSON body and answers a bad value with a 422 naming it.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable
from dataclasses import MISSING, dataclass, fields
from typing import Annotated, Any

import pydantic
from fastapi import Depends, Request
from starlette.responses import HTMLResponse, Response

from app.db import transaction
from app.errors import InvalidInput
from app.services.jobs.kind import JobParams, create, enqueue
from app.store import Store
from app.tables import Job
from app.web.params import DbInt
from app.web.responses import redirect_after_post

FORM_STATUS = 422


async def submitted_form(request: Request) -> dict[str, str]:
    """The submitted form's text fields (files left out)."""
    form = await request.form()
    return {key: value for key, value in form.items() if isinstance(value, str)}


FormData = Annotated[dict[str, str], Depends(submitted_form)]


@dataclass(frozen=True)
class FormError:
    """Why a form was refused: the form (its ``data-form``), the field named, the reason."""

    form: str
    field: str | None
    message: str


def queue_job(store: Store, params_type: type[JobParams], data: dict[str, Any]) -> Job:
    """Build ``params_type`` from ``data`` and queue its job, in one write transaction.

    Raises
    ------
    InvalidInput, NotFound
        A bad value or an unknown name: nothing is queued.

    """
    with transaction(store.write_factory) as session:
        return enqueue(session, create(session, params_type, data))


def submit_job_form(
    request: Request,
    store: Store,
    form_id: str,
    params_type: type[JobParams],
    data: Callable[[], dict[str, Any]],
    page: Callable[[FormError], HTMLResponse],
) -> Response:
    """Queue the job ``data()`` describes and go to its page, or show ``page`` with the error.

    ``data`` parses the form (its own :class:`InvalidInput` is shown the same way); ``page``
    renders the form's page with the error beside the field (status 422).
    """
    try:
        job = queue_job(store, params_type, data())
    except InvalidInput as exc:
        error = FormError(form_id, exc.field, exc.reason)
        response = page(error)
        response.status_code = FORM_STATUS
        return response
    return redirect_after_post(request, f"/jobs/{job.id}")


def _column_bounded(hint: Any) -> Any:
    """``hint`` with every ``int`` in it (``int | None``, ``list[int]``) bounded like a column.

    A job's integers are stored and some are compared with 4-byte columns (limits, seeds): a
    JSON body is bounded like every other integer the API takes, so 3e9 is a 422, not a 500.
    """
    if hint is int:
        return DbInt
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if not args or origin is None or origin is typing.Literal:
        return hint
    bounded = tuple(_column_bounded(arg) for arg in args)
    if origin is typing.Union or origin is types.UnionType:
        return typing.Union[bounded]  # noqa: UP007 - built from a tuple of members
    if origin is Annotated:
        return hint
    return origin[bounded] if len(bounded) > 1 else origin[bounded[0]]


def body_model(
    params_type: type[JobParams], exclude: frozenset[str] = frozenset()
) -> type[pydantic.BaseModel]:
    """The JSON body that starts a ``params_type`` job: its fields and defaults.

    Types are checked by pydantic (a 422 naming the field), values by the class itself; read
    it with ``model_dump(exclude_unset=True)`` so that an omitted field takes the class's
    default, or its store-dependent one (a judge's mode). ``exclude`` leaves out the fields a
    route's path gives (the benchmark).
    """
    definitions: dict[str, Any] = {}
    hints = typing.get_type_hints(params_type)
    hints = {name: _column_bounded(hint) for name, hint in hints.items()}
    for f in fields(params_type):
        if f.name in exclude:
            continue
        if f.default is not MISSING:
            definitions[f.name] = (hints[f.name], f.default)
        elif f.default_factory is not MISSING:
            definitions[f.name] = (hints[f.name], pydantic.Field(default_factory=f.default_factory))
        else:
            definitions[f.name] = (hints[f.name], ...)
    doc = (params_type.__doc__ or params_type.title).strip()
    return pydantic.create_model(
        f"{params_type.__name__}Body",
        __doc__=doc,
        __config__=pydantic.ConfigDict(extra="forbid"),
        **definitions,
    )


# Text fields this long or with line breaks (prompt templates) are text areas.
_LONG_TEXT = 80


@dataclass(frozen=True)
class FormField:
    """One control of the generic job form, built from a parameters field's type.

    ``control`` is ``number``, ``decimal``, ``checkbox``, ``text``, ``textarea`` or ``select``
    (``choices`` then lists its options); ``value`` is the default as the form shows it.
    """

    name: str
    label: str
    control: str
    value: str
    required: bool
    choices: tuple[str, ...] = ()
    hint: str = ""


def form_settable(params_type: type[JobParams]) -> bool:
    """Whether every required field of ``params_type`` can be typed into the generic form.

    A kind with a required mapping (a lie probe's capture spec) has its own form instead.
    """
    hints = typing.get_type_hints(params_type)
    return all(
        _form_control(hints[f.name]) is not None
        for f in fields(params_type)
        if f.default is MISSING and f.default_factory is MISSING
    )


def _form_control(hint: Any) -> str | None:
    """The control of a field typed ``hint``; None for a type a form cannot carry."""
    args = typing.get_args(hint)
    if type(None) in args:
        (hint,) = [a for a in args if a is not type(None)]
    origin = typing.get_origin(hint)
    if origin is list:
        return "text"
    if origin is not None:
        return None
    return {int: "number", float: "decimal", bool: "checkbox", str: "text"}.get(hint)


def _form_value(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool):
        return "true" if value else ""
    return str(value)


def form_fields(
    params_type: type[JobParams],
    values: dict[str, str],
    choices: dict[str, tuple[str, ...]],
) -> list[FormField]:
    """The generic form's controls for ``params_type``, showing ``values`` over the defaults.

    ``choices`` gives the options of fields naming what the store holds (``benchmark``,
    ``model``): those are selects. Fields a form cannot carry (mappings) are left out, so
    they keep their defaults.
    """
    hints = typing.get_type_hints(params_type)
    found: list[FormField] = []
    for f in fields(params_type):
        control = _form_control(hints[f.name])
        if control is None:
            continue
        required = f.default is MISSING and f.default_factory is MISSING
        default: Any = None
        if f.default is not MISSING:
            default = f.default
        elif f.default_factory is not MISSING:
            default = f.default_factory()
        value = values[f.name] if f.name in values else _form_value(default)
        hint = ""
        if typing.get_origin(hints[f.name]) is list or (
            typing.get_origin(hints[f.name]) in (typing.Union, types.UnionType)
            and any(typing.get_origin(a) is list for a in typing.get_args(hints[f.name]))
        ):
            hint = "comma-separated; blank for the default"
        elif not required and default is None:
            hint = "optional"
        options = choices.get(f.name, ())
        if options and control == "text" and typing.get_origin(hints[f.name]) is not list:
            control = "select"
        elif control == "text" and (len(str(default or "")) > _LONG_TEXT or "\n" in value):
            control = "textarea"
        label = f.name.replace("_", " ").capitalize()
        found.append(FormField(f.name, label, control, value, required, options, hint))
    return found
