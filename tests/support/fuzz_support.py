"""Hypothesis strategies for requests built from an OpenAPI schema, for the schema fuzz.

Walking ``/openapi.json`` instead of keeping a list of routes means an operation added later is
fuzzed too. Each JSON-schema type gets values biased towards the edges that broke this app
before: text with NUL or lone surrogates, huge or empty text, integers past a 4-byte column or
a 64-bit driver, NaN and infinities, missing required fields and values of the wrong type.
Parameters whose name appears in ``known`` are often given a real value from the seeded
database, so that requests get past 404 into the handlers.
"""

from __future__ import annotations

import json
import math
import string
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

PLAIN = string.ascii_letters + string.digits + "-_"
"""The characters of a careful client's text."""

METHODS = ("get", "put", "post", "delete", "patch", "head", "options")

HOSTILE_TEXT = [
    "",
    " ",
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udfffy",
    "\ufffe\uffff",
    "\u202eevil",
    "%",
    "%00",
    "../../etc/passwd",
    "/",
    "a/b",
    "\\",
    "=",
    "a=b=c",
    ":",
    "-score:",
    "'; DROP TABLE benchmarks; --",
    "<script>alert(1)</script>",
    "{prompt}{first}{second}{",
    "\n\r\t",
    "é" * 3_000,
    "\U0001d54f" * 1_500,  # outside the BMP: a surrogate pair in UTF-16
    "x" * 12_000,
]
"""Text that has broken a store or a parser somewhere: NUL, surrogates, separators, sizes."""

EDGE_INTS = [0, 1, -1, 2**31 - 1, 2**31, -(2**31) - 1, 2**63 - 1, 2**63, 2**64, -(2**63) - 1]
"""Integers at the edges of PostgreSQL's ``INTEGER`` and of a 64-bit driver."""

EDGE_FLOATS = [0.0, -0.0, 0.5, 1.0, 1e-320, 1e308, math.nan, math.inf, -math.inf]

EDGE_NUMBER_TEXT = ["nan", "NaN", "inf", "-inf", "Infinity", "1e309", "-0", "1e3", "0x10", " 1"]
"""Numbers as a query string spells them, some of which Python's parsers accept."""

RAW_URL_TEXT = ["%", "%zz", "%ff", "%00", "%ed%a0%80", "%c0%ae%c0%ae", "%2F..%2F"]
"""Percent escapes put into a URL verbatim: truncated, invalid UTF-8, an encoded NUL."""

MAX_URL = 60_000
"""Longest URL sent: httpx refuses one over 64 KiB (a server, one far shorter)."""

MALFORMED_BODIES = [
    b"",
    b"{",
    b"null",
    b"[]",
    b'"text"',
    b"\xff\xfe\x00",
    b'{"a": NaN}',
    b"[" * 5_000 + b"]" * 5_000,
    b'{"instance_id": 1, "instance_id": "x"}',
]
"""JSON bodies that are not what the operation reads: broken, wrong type, very deep."""


@dataclass(frozen=True)
class Operation:
    """One method of one path of the schema, with its parameters and its JSON body schema."""

    method: str
    path: str
    parameters: tuple[dict[str, Any], ...]
    body: dict[str, Any] | None
    body_required: bool

    @property
    def key(self) -> tuple[str, str]:
        return self.method.upper(), self.path


@dataclass(frozen=True)
class FuzzRequest:
    """A generated request, ready to send: ``url`` is already percent-encoded."""

    method: str
    url: str
    content: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> str:
        """The request as a line a person can replay (the body cut to 300 bytes)."""
        body = "" if self.content is None else f" body={self.content[:300]!r}"
        return f"{self.method} {self.url[:500]}{body} headers={dict(self.headers)}"


def operations(spec: Mapping[str, Any]) -> list[Operation]:
    """Every operation of an OpenAPI document, in document order."""
    out: list[Operation] = []
    for path, item in spec["paths"].items():
        shared = item.get("parameters", [])
        for method in METHODS:
            op = item.get(method)
            if op is None:
                continue
            content = op.get("requestBody", {}).get("content", {})
            body = content.get("application/json", {}).get("schema")
            required = bool(op.get("requestBody", {}).get("required", False))
            params = tuple(shared) + tuple(op.get("parameters", []))
            out.append(Operation(method, path, params, body, required))
    return out


def _weighted(choices: Sequence[tuple[int, SearchStrategy[Any]]]) -> SearchStrategy[Any]:
    """One of ``choices``, each drawn with probability proportional to its weight."""
    table = [s for weight, s in choices for _ in range(weight)]
    return st.integers(0, len(table) - 1).flatmap(lambda i: table[i])


def _any_json() -> SearchStrategy[Any]:
    """A JSON value of any type: what a field gets when it is sent the wrong type."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.sampled_from(EDGE_INTS),
        st.sampled_from(EDGE_FLOATS),
        st.sampled_from(HOSTILE_TEXT),
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
        ),
        max_leaves=6,
    )


class SchemaValues:
    """Strategies for values of the JSON schemas of one OpenAPI document.

    Parameters
    ----------
    spec
        The OpenAPI document (for ``$ref``).
    known
        Real values by parameter or field name (``queue_id``, ``name``, ...); a value of a name
        found here is often a real one.
    wild
        Hostile values (edges, wrong types, missing required fields, extra keys) when true;
        when false, values that a careful client would send, which is what gets a request past
        validation into the handler's own checks.

    """

    def __init__(
        self, spec: Mapping[str, Any], known: Mapping[str, Sequence[Any]], *, wild: bool
    ) -> None:
        self.spec = spec
        self.known = known
        self.wild = wild

    def resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        """``schema`` with a ``$ref`` followed (``#/components/schemas/X``)."""
        while "$ref" in schema:
            node: Any = self.spec
            for part in schema["$ref"].removeprefix("#/").split("/"):
                node = node[part]
            schema = node
        return schema

    def value(self, schema: Mapping[str, Any], name: str | None = None) -> SearchStrategy[Any]:
        """A value for ``schema``, a real one of ``name`` or (when wild) of any type."""
        schema = self.resolve(schema)
        typed = self._typed(schema, name)
        choices = [(6, typed), (1, _any_json())] if self.wild else [(1, typed)]
        # An enum names its own values; a name's real values may belong to another operation.
        if name is not None and self.known.get(name) and (self.wild or "enum" not in schema):
            choices.append((6, st.sampled_from(list(self.known[name]))))
        return _weighted(choices)

    def _typed(self, schema: Mapping[str, Any], name: str | None) -> SearchStrategy[Any]:
        for key in ("anyOf", "oneOf", "allOf"):
            if key in schema:
                return st.one_of([self.value(s, name) for s in schema[key]])
        if "enum" in schema:
            enum = st.sampled_from(schema["enum"])
            return _weighted([(4, enum), (1, self._text(schema))]) if self.wild else enum
        kind = schema.get("type")
        if kind == "array":
            # The items of a repeated parameter take the parameter's real values.
            return st.lists(
                self.value(schema.get("items", {}), name), max_size=4 if self.wild else 2
            )
        builder: Callable[[Mapping[str, Any]], SearchStrategy[Any]] = {
            "string": self._text,
            "integer": self._integer,
            "number": self._number,
            "boolean": lambda _: st.booleans(),
            "null": lambda _: st.none(),
            "object": self._object,
        }.get(kind, lambda _: _any_json())
        return builder(schema)

    def _text(self, schema: Mapping[str, Any]) -> SearchStrategy[Any]:
        longest = schema.get("maxLength")
        if not self.wild:
            return st.text(PLAIN, min_size=1, max_size=min(12, longest or 12))
        choices = [(3, st.text(max_size=20)), (3, st.sampled_from(HOSTILE_TEXT))]
        if longest is not None:
            # Exactly at the limit and one past it: the off-by-one a validator gets wrong.
            choices.append((1, st.sampled_from(["x" * longest, "x" * (longest + 1)])))
        return _weighted(choices)

    def _integer(self, schema: Mapping[str, Any]) -> SearchStrategy[Any]:
        low, high = schema.get("minimum"), schema.get("maximum")
        low = None if low is None else math.ceil(low)
        high = None if high is None else math.floor(high)
        if not self.wild:
            start = 0 if low is None else low
            return st.integers(start, start + 20 if high is None else min(high, start + 20))
        bounds = [b + d for b in (low, high) if b is not None for d in (-1, 0, 1)]
        return _weighted(
            [
                (3, st.integers(low, high)),
                (2, st.sampled_from(EDGE_INTS + bounds)),
                (1, st.sampled_from(EDGE_NUMBER_TEXT)),
            ]
        )

    def _number(self, schema: Mapping[str, Any]) -> SearchStrategy[Any]:
        if not self.wild:
            low = schema.get("minimum", schema.get("exclusiveMinimum", -1e6))
            high = schema.get("maximum", schema.get("exclusiveMaximum", 1e6))
            return st.floats(low, high, exclude_min="exclusiveMinimum" in schema)
        return _weighted(
            [
                (2, st.floats()),
                (2, st.sampled_from(EDGE_FLOATS)),
                (1, st.sampled_from(EDGE_INTS)),
                (1, st.sampled_from(EDGE_NUMBER_TEXT)),
            ]
        )

    def _object(self, schema: Mapping[str, Any]) -> SearchStrategy[Any]:
        props: Mapping[str, Any] = schema.get("properties", {})
        required = set(schema.get("required", []))
        values = {name: self.value(sub, name) for name, sub in props.items()}
        if not self.wild:
            return some_of(values, required)
        missing = st.just(_MISSING)
        fields = {
            # A required field left out now and then, an optional one half the time.
            name: _weighted([(9 if name in required else 1, value.map(_Some)), (1, missing)])
            for name, value in values.items()
        }
        extra = st.dictionaries(st.sampled_from(HOSTILE_TEXT[:12]), _any_json(), max_size=1)
        return st.builds(_assemble, st.fixed_dictionaries(fields), extra)


def some_of(
    values: Mapping[str, SearchStrategy[Any]], required: Collection[str] = ()
) -> SearchStrategy[dict[str, Any]]:
    """The ``required`` entries of ``values`` and at most two others, each with its value.

    What a careful client sends: few optional parameters at a time get through a handler's
    checks, as each one set is another way to miss the seeded data.
    """
    optional = sorted(set(values) - set(required))
    chosen = (
        st.lists(st.sampled_from(optional), max_size=2, unique=True) if optional else st.just([])
    )
    must = [name for name in values if name in required]
    return chosen.flatmap(
        lambda names: st.fixed_dictionaries({name: values[name] for name in must + names})
    )


@dataclass(frozen=True)
class _Some:
    value: Any


_MISSING = object()


def _assemble(fields: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    body = {k: v.value for k, v in fields.items() if isinstance(v, _Some)}
    return {**extra, **body}


def _as_text(value: Any) -> str:
    """A value as a query string or a path segment spells it (JSON for a list or an object)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return value
    return json.dumps(value) if isinstance(value, dict | list) else str(value)


def _encode(text: str) -> str:
    # A lone surrogate has no UTF-8 encoding; its CESU-8 bytes are what a broken client sends.
    return quote(text.encode("utf-8", "surrogatepass"), safe="")


def _url_part(values: SchemaValues, param: Mapping[str, Any]) -> SearchStrategy[list[str]]:
    """The encoded texts of one path or query parameter (several for a repeated one)."""
    value = values.value(param.get("schema", {}), param["name"])

    def spell(v: Any) -> list[str]:
        items = v if isinstance(v, list) and param["in"] == "query" else [v]
        return [_encode(_as_text(item)) for item in items if item is not None]

    if not values.wild:
        return value.map(spell)
    raw = st.sampled_from(RAW_URL_TEXT).map(lambda r: [r])
    return _weighted([(9, value.map(spell)), (1, raw)])


def _body(values: SchemaValues, schema: Mapping[str, Any]) -> SearchStrategy[bytes | None]:
    # ensure_ascii writes a lone surrogate as its \u escape, as a JSON client can; allow_nan
    # writes NaN and Infinity, which are not JSON but which Python's own parser reads.
    encoded = values.value(schema).map(lambda v: json.dumps(v, allow_nan=True).encode())
    if not values.wild:
        return encoded
    return _weighted([(8, encoded), (1, st.sampled_from(MALFORMED_BODIES)), (1, st.none())])


def requests(
    spec: Mapping[str, Any], known: Mapping[str, Sequence[Any]], op: Operation
) -> SearchStrategy[FuzzRequest]:
    """Requests to ``op``: half hostile, half careful (:class:`SchemaValues`)."""
    wild = _requests(SchemaValues(spec, known, wild=True), op)
    tame = _requests(SchemaValues(spec, known, wild=False), op)
    return _weighted([(1, wild), (1, tame)])


def _requests(values: SchemaValues, op: Operation) -> SearchStrategy[FuzzRequest]:
    """Requests to ``op``: every path parameter set, query parameters each present or not."""
    path_parts = {
        p["name"]: _url_part(values, p).map(lambda texts: texts[0] if texts else "")
        for p in op.parameters
        if p["in"] == "path"
    }
    query = {p["name"]: _url_part(values, p) for p in op.parameters if p["in"] == "query"}
    if values.wild:
        query_parts = st.fixed_dictionaries({k: v | st.just([]) for k, v in query.items()})
    else:
        query_parts = some_of(query)
    headers = {
        p["name"]: values.value(p.get("schema", {}), p["name"]).map(_as_text)
        for p in op.parameters
        if p["in"] == "header"
    }
    body = _body(values, op.body) if op.body is not None else st.none()

    def build(
        path: Mapping[str, str],
        query: Mapping[str, list[str]],
        head: Mapping[str, str],
        content: bytes | None,
    ) -> FuzzRequest:
        url = op.path
        for name, text in path.items():
            url = url.replace("{" + name + "}", text)
        pairs = [f"{quote(k, safe='')}={v}" for k, texts in query.items() for v in texts]
        while pairs and len(url) + sum(len(p) + 1 for p in pairs) > MAX_URL:
            pairs.pop()
        if pairs:
            url += "?" + "&".join(pairs)
        # A header cannot carry a newline or a non-latin-1 character: send them escaped.
        safe_head = {k: _encode(v) for k, v in head.items()}
        if content is not None:
            safe_head["content-type"] = "application/json"
        return FuzzRequest(op.method.upper(), url, content, safe_head)

    return st.builds(
        build,
        st.fixed_dictionaries(path_parts),
        query_parts,
        st.fixed_dictionaries(headers),
        body,
    )
