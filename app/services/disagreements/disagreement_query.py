"""The parameters of one disagreement list, parsed in one place from any surface.

The page, its CSV and JSON twins, the CLI and queue sources all build a
:class:`DisagreementQuery` here, from raw ``name -> [values]`` parameters or typed values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from app.errors import InvalidInput
from app.services.disagreements.modes import (
    DisagreementMode,
    all_modes,
    get_mode,
    modes_declaring,
)
from app.services.disagreements.modes.base import Param, ParamKind, ParamValue

__all__ = [
    "COMMON_PARAMS",
    "DEFAULT_MODE",
    "LIMIT",
    "DisagreementQuery",
    "build_query",
    "mode_param_names",
    "parse_disagreement_query",
]

DEFAULT_MODE = "threshold"
COMMON_PARAMS = ("detector", "label", "mode", "positive", "limit")
"""Parameters every mode takes (the rest are declared by the modes)."""
LIMIT = Param("limit", ParamKind.INTEGER, "Limit", "Most items listed.", low=0)


@dataclass(frozen=True)
class DisagreementQuery:
    """Which disagreement list to compute: mode, detectors, label set and the mode's parameters.

    ``params`` holds only the parameters that were given (checked, in the mode's declared
    order) and that the mode declares; ``label`` is ``None`` when not given (the caller's
    default applies); ``limit`` ``None`` lists every item.
    """

    mode: str = DEFAULT_MODE
    detectors: tuple[str, ...] = ()
    label: str | None = None
    positive: str | None = None
    limit: int | None = None
    params: tuple[tuple[str, ParamValue], ...] = ()

    @property
    def spec(self) -> DisagreementMode:
        """The registered mode."""
        return get_mode(self.mode)

    @property
    def values(self) -> dict[str, ParamValue]:
        """The given mode parameters by name."""
        return dict(self.params)

    def missing(self) -> list[str]:
        """What must still be chosen before the list can be computed (empty when nothing)."""
        return self.spec.missing(self.detectors, self.values)

    def with_label(self, label: str) -> DisagreementQuery:
        """The same query against label set ``label``."""
        return replace(self, label=label)

    def with_detectors(self, detectors: Sequence[str]) -> DisagreementQuery:
        """The same query with other detectors."""
        return replace(self, detectors=tuple(detectors))

    def with_limit(self, limit: int | None) -> DisagreementQuery:
        """The same query with another limit (``None``: every item)."""
        return replace(self, limit=limit)

    def as_params(self, *, default_limit: int | None = None) -> dict[str, Any]:
        """Query-string parameters that parse back into this query (unset ones are ``None``).

        ``limit`` is left out when it equals ``default_limit`` (the surface's own default).
        """
        return {
            "detector": list(self.detectors),
            "label": self.label,
            "mode": self.mode,
            **self.values,
            "positive": self.positive,
            "limit": None if self.limit == default_limit else self.limit,
        }


def mode_param_names() -> list[str]:
    """Every parameter some mode declares, once, in menu order."""
    return list(dict.fromkeys(p.name for m in all_modes() for p in m.params))


def _declared(spec: DisagreementMode, values: Mapping[str, Any], *, strict: bool) -> dict[str, Any]:
    """The ``values`` that ``spec`` declares; the others raise when ``strict``, else drop.

    Dropping lets a form that switches modes, or a stale parameter in a URL, never fail.
    """
    out = {}
    for name, value in values.items():
        if spec.param(name) is not None:
            out[name] = value
        elif strict:
            owners = [m.name for m in modes_declaring(name)]
            if not owners:
                raise InvalidInput(
                    f"unknown parameter {name!r}; modes take {', '.join(mode_param_names())}"
                )
            which = owners[0] if len(owners) == 1 else f"{', '.join(owners[:-1])} and {owners[-1]}"
            raise InvalidInput(
                f"{name} applies to {which} mode{'s' if len(owners) > 1 else ''} only"
            )
    return out


def build_query(
    mode: str = DEFAULT_MODE,
    detectors: Sequence[str] = (),
    *,
    label: str | None = None,
    positive: str | None = None,
    limit: int | None = None,
    values: Mapping[str, ParamValue | None] | None = None,
    strict: bool = True,
) -> DisagreementQuery:
    """A checked query from typed values (``None`` values are unset).

    Raises
    ------
    InvalidInput
        Unknown mode; a value out of its parameter's type or bounds; a negative limit; with
        ``strict``, a parameter the mode does not declare (else it is dropped).

    """
    spec = get_mode(mode)
    given = {name: v for name, v in (values or {}).items() if v is not None}
    kept = _declared(spec, given, strict=strict)
    checked = tuple((p.name, p.check(kept[p.name])) for p in spec.params if p.name in kept)
    if limit is not None:
        LIMIT.check(limit)
    return DisagreementQuery(mode, tuple(detectors), label, positive, limit, checked)


def _last(values: Sequence[str]) -> str | None:
    """The last non-blank value of a repeated parameter (forms send empty fields as ``""``)."""
    return next((v for v in reversed(values) if v.strip()), None)


def parse_disagreement_query(
    raw: Mapping[str, Sequence[str]], *, strict: bool = False
) -> DisagreementQuery:
    """The query of raw parameters ``{name: [values]}`` (a query string or CLI options).

    Empty values are unset; ``detector`` repeats, other parameters take their last value.
    Parameters the chosen mode does not declare are dropped, or with ``strict`` refused;
    names no mode knows are ignored, or with ``strict`` refused.

    Raises
    ------
    InvalidInput
        As :func:`build_query`, or a value that does not parse, naming the parameter.

    """
    text = {name: v for name, values in raw.items() if (v := _last(values)) is not None}
    spec = get_mode(text.get("mode", DEFAULT_MODE))
    known = set(mode_param_names())
    if strict:
        _declared(spec, {n: t for n, t in text.items() if n not in COMMON_PARAMS}, strict=True)
    kept = _declared(spec, {n: t for n, t in text.items() if n in known}, strict=False)
    values: dict[str, ParamValue | None] = {}
    for name, t in kept.items():
        param = spec.param(name)
        assert param is not None
        values[name] = param.parse(t)
    return build_query(
        spec.name,
        [d for d in raw.get("detector", ()) if d.strip()],
        label=text.get("label"),
        positive=text.get("positive"),
        limit=int(LIMIT.parse(text["limit"])) if "limit" in text else None,
        values=values,
        strict=strict,
    )
