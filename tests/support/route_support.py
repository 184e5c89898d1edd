"""Every route of the app with its declared parameters, for tests that attack them all.

Walking the routes, not a hand-kept list, means a route added later is attacked too.
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, params
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel
from pydantic.fields import FieldInfo

PATH_PARAM = re.compile(r"{([^}:]+)(?::[^}]+)?}")


@dataclass(frozen=True)
class Param:
    """One parameter of one route: ``where`` is path, query, form or json."""

    method: str
    path: str
    where: str
    name: str
    annotation: Any
    info: FieldInfo

    @property
    def id(self) -> str:
        return f"{self.method} {self.path} {self.where}:{self.name}"


def api_routes(app: FastAPI) -> list[APIRoute]:
    """Every APIRoute, also inside included routers (kept apart by newer FastAPI)."""
    found: list[APIRoute] = []

    def walk(routes: list[Any]) -> None:
        for route in routes:
            if isinstance(route, APIRoute):
                found.append(route)
            elif (router := getattr(route, "original_router", None)) is not None:
                walk(router.routes)

    walk(app.routes)
    return found


def _fields(dependant: Dependant) -> Iterator[tuple[str, Any]]:
    for kind in ("path_params", "query_params", "body_params"):
        for field in getattr(dependant, kind):
            yield kind, field
    for sub in dependant.dependencies:
        yield from _fields(sub)


def route_params(app: FastAPI) -> list[Param]:
    """Every declared parameter of every route; a JSON body model contributes its fields."""
    out: list[Param] = []
    for route in api_routes(app):
        for method in sorted(route.methods):
            for kind, field in _fields(route.dependant):
                info = field.field_info
                annotation = info.annotation
                if kind == "body_params" and _is_model(annotation):
                    for name, sub in annotation.model_fields.items():
                        out.append(Param(method, route.path, "json", name, sub.annotation, sub))
                    continue
                where = {"path_params": "path", "query_params": "query"}.get(kind)
                if where is None:
                    where = "form" if isinstance(info, params.Form) else "json"
                out.append(Param(method, route.path, where, field.name, annotation, info))
    return out


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def base_types(annotation: Any) -> set[Any]:
    """The plain types a parameter takes: ``list[str] | None`` gives ``{str}``."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return base_types(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, list, tuple, set):
        return set().union(*(base_types(a) for a in typing.get_args(annotation)))
    return {annotation}


def takes_a_list(annotation: Any) -> bool:
    """Whether a parameter's value is a list (``list[int] | None`` is)."""
    origin = typing.get_origin(annotation)
    if origin in (list, tuple, set):
        return True
    if origin in (typing.Annotated, typing.Union, types.UnionType):
        return any(takes_a_list(a) for a in typing.get_args(annotation))
    return False


def fill_path(path: str, values: dict[str, str], default: str = "1") -> str:
    """``path`` with each ``{param}`` replaced by ``values[param]`` (or ``default``)."""
    return PATH_PARAM.sub(lambda m: values.get(m.group(1), default), path)
