r"""Model text as safe HTML: CommonMark (tables, strikethrough) with LaTeX left for KaTeX.

Model output is untrusted. The renderer never passes HTML through (``html`` off: tags come
out as text), keeps only ``http``, ``https`` and ``mailto`` links (or relative ones), and
turns images into plain links so that nothing is fetched when a page opens. Math spans
(``$...$``, ``$$...$$``, ``\(...\)``, ``\[...\]``) are cut out before Markdown reads them
and emitted, escaped, inside ``<span class="math">`` for the vendored KaTeX to render in the
browser (``static/app.js``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token
from markupsafe import Markup

SAFE_SCHEMES = frozenset({"http", "https", "mailto"})
# A scheme is whatever precedes the first ':' that comes before any '/', '?' or '#'.
_SCHEME = re.compile(r"^([^/?#]*?):")
# Control characters and spaces browsers strip or ignore inside a URL's scheme.
_IGNORED = re.compile(r"[\x00-\x20\x7f]+")
LINK_REL = "nofollow noopener noreferrer"

# (opening, closing, display) of the math delimiters, longest opening first.
_MATH_DELIMITERS = (
    ("$$", "$$", True),
    ("\\[", "\\]", True),
    ("\\(", "\\)", False),
    ("$", "$", False),
)


def safe_link(url: str) -> bool:
    """Whether ``url`` may be a link target: relative, or of a scheme in :data:`SAFE_SCHEMES`."""
    bare = _IGNORED.sub("", url)
    found = _SCHEME.match(bare)
    return found is None or found.group(1).lower() in SAFE_SCHEMES


def _closing(src: str, start: int, opener: str, closer: str) -> int | None:
    """Index of the ``closer`` that ends a math span opened just before ``start``, if any."""
    if opener == "$" and (start >= len(src) or src[start].isspace() or src[start] == "$"):
        return None  # "$ 5" and "$$" open no inline math
    at = start
    while (end := src.find(closer, at)) != -1:
        if end == start or (src[end - 1] == "\\" and opener.startswith("$")):
            at = end + 1  # an empty span or an escaped dollar
            continue
        if opener == "$" and (src[end - 1].isspace() or src[end + 1 : end + 2].isdigit()):
            at = end + 1  # "$5 and $10": a closing dollar hugs its math and no digit follows
            continue
        if "\n\n" in src[start:end]:
            return None
        return end
    return None


def _math(state: StateInline, silent: bool) -> bool:
    """Inline rule: one math span at ``state.pos``, kept verbatim as a ``math`` token."""
    src, pos = state.src, state.pos
    for opener, closer, display in _MATH_DELIMITERS:
        if not src.startswith(opener, pos):
            continue
        end = _closing(src, pos + len(opener), opener, closer)
        if end is None:
            continue
        if not silent:
            token = state.push("math", "", 0)
            token.content = src[pos : end + len(closer)]
            token.meta = {"display": display}
        state.pos = end + len(closer)
        return True
    return False


def _render_math(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    token = tokens[idx]
    cls = "math math-display" if token.meta.get("display") else "math"
    return f'<span class="{cls}">{escapeHtml(token.content)}</span>'


def _render_image(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    # An image becomes a link to it: a page of model output never loads anything by itself.
    token = tokens[idx]
    alt = escapeHtml(self.renderInlineAsText(token.children or [], options, env)) or "image"
    src = str(token.attrGet("src") or "")
    if not src or not safe_link(src):
        return f'<span class="md-image">[image: {alt}]</span>'
    return f'<a class="md-image" href="{escapeHtml(src)}" rel="{LINK_REL}">[image: {alt}]</a>'


def _render_link_open(self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any) -> str:
    tokens[idx].attrSet("rel", LINK_REL)
    return str(self.renderToken(tokens, idx, options, env))


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False})
    md.enable(["table", "strikethrough"])
    # Checked after markdown-it decodes entities and percent-encodes the URL.
    md.validateLink = safe_link  # type: ignore[method-assign]
    # Before "escape": "\(" and "\[" open math, not escaped brackets.
    md.inline.ruler.before("escape", "math", _math)
    md.add_render_rule("math", _render_math)
    md.add_render_rule("image", _render_image)
    md.add_render_rule("link_open", _render_link_open)
    return md


_MD = _parser()


def render_markdown(text: str) -> Markup:
    """``text`` as safe HTML (see the module docstring); the ``markdown`` template filter."""
    # markdown-it escapes every text node and attribute it emits; html is off, so no input
    # reaches the output unescaped.
    return Markup(_MD.render(text or ""))
