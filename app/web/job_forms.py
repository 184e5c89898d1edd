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
