r"""Model text as safe HTML: CommonMark (tables, strikethrough) with LaTeX left for KaTeX.

Model output is untrusted. The renderer never passes HTML through (``html`` off: tags come
out as text), keeps only ``http``, ``https`` and ``mailto`` links (or relative ones), and
turns images into plain links so that nothing is fetched when a page opens. Math spans
(``$...$``, ``$$...$$``, ``\(...\)``, ``\[...\]``) are cut out before Markdown reads them
and emitted, escaped, inside ``<span class="math">`` for the vendored KaTeX to render in the
browser (``static/app.js``).

Model text often holds code without a Markdown fence (none of JudgeBench's LiveCodeBench
responses fence theirs), and Markdown would merge its lines and drop its indentation. Two
rules keep it readable, decided on the text before Markdown reads it:

* a block of lines between blank lines (outside fences) whose lines mostly look like code
  (statement keywords, assignments, calls, lines ending in ``;``, ``{`` or ``}``, and
  indented lines beside such lines) is fenced, so it renders as ``<pre>`` exactly as
  written; runs of such blocks, with the blank lines between them, become one fence. A
  block that opens a list or holds display math is never fenced, and a one-line block only
  when it continues code;
* every other single line break is kept as ``<br>`` (``breaks``), as chat interfaces show
  model text.

A wrong guess costs little: the text is shown verbatim in monospace, still escaped.
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


# A fence opening or closing line: up to three spaces, then three or more backticks or tildes.
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_LIST_OR_QUOTE = re.compile(r"^\s*([-*+]\s|\d{1,9}[.)]\s|>)")
_CODE_LINE = re.compile(
    r"""^\s*(?:
      (?:def|class|if|elif|else|for|while|with|try|except|finally|async\s+def)\b.*:$  # a block
    | (?:return|import|raise|yield|pass|break|continue|from\s+\S+\s+import)\b    # a statement
    | (?:print|puts|printf|console\.log|System\.out\.\w+)\s*\(               # output
    | \#\s*(?:include|define|pragma)\b | //                  # C preprocessor, comment
    | [A-Za-z_][\w.]*(?:\[[^\]]*\])*(?:\s*,\s*[A-Za-z_][\w.]*)*\s*
        (?:[-+*/%&|^]|//|<<|>>|\*\*)?=(?!=)\s*\S                              # an assignment
    | [A-Za-z_][\w.]*\(.*\)$                                                 # a call on its own
    | .*[;{}]$                                                              # C-like line end
    )""",
    re.X,
)
# Indented lines that are not list items count as code too, but only beside a line of
# the kinds above: an indented outline or table of plain words stays Markdown.
_INDENTED = re.compile(r"^(?: {2,}|\t)(?!\s|[-*+]\s|\d{1,9}[.)]\s)\S")
_DISPLAY_MATH = ("$$", "\\[", "\\(")


def _looks_like_code(block: list[str], after_code: bool) -> bool:
    """Whether a blank-line-delimited ``block`` of lines is code (see the module docstring).

    Parameters
    ----------
    block : list of str
        Its lines, none blank.
    after_code : bool
        Whether the block before it (blank lines apart) was code.

    """
    if _LIST_OR_QUOTE.match(block[0]) or any(d in line for line in block for d in _DISPLAY_MATH):
        return False
    strong = sum(1 for line in block if _CODE_LINE.match(line))
    found = sum(1 for line in block if _CODE_LINE.match(line) or _INDENTED.match(line))
    if 2 * found <= len(block):
        return False
    return after_code or (strong >= 1 and found >= 2)


def _fenced(lines: list[str]) -> list[str]:
    """``lines`` inside a backtick fence longer than any backtick run they hold."""
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence, *lines, fence]


def fence_unfenced_code(text: str) -> str:
    """``text`` with its unfenced code blocks fenced (see the module docstring).

    Parameters
    ----------
    text : str
        Markdown as a model wrote it.

    Returns
    -------
    str
        The same text, where each run of code-like blocks outside a fence is wrapped in a
        backtick fence; nothing else changes but line endings (all made LF, as Markdown reads
        them).

    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[str] = []
    code: list[str] = []  # the current run of code blocks, with the blank lines inside it
    pending_blank: list[str] = []  # blank lines after that run, not yet known to be inside it
    block: list[str] = []

    def close_code() -> None:
        if code:
            out.extend(_fenced(code))
            code.clear()
        out.extend(pending_blank)
        pending_blank.clear()

    def end_block() -> None:
        if not block:
            return
        if _looks_like_code(block, after_code=bool(code)):
            code.extend(pending_blank)
            pending_blank.clear()
            code.extend(block)
        else:
            close_code()
            out.extend(block)
        block.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        opened = _FENCE.match(line)
        if opened:
            # A fence the model wrote: copied as it is, up to its closing line or the end.
            end_block()
            close_code()
            mark = opened.group(1)
            closing = re.compile(rf"^ {{0,3}}{re.escape(mark[0])}{{{len(mark)},}}\s*$")
            out.append(line)
            i += 1
            while i < len(lines):
                out.append(lines[i])
                i += 1
                if closing.match(out[-1]):
                    break
            continue
        if line.strip():
            block.append(line)
        else:
            end_block()
            (pending_blank if code else out).append(line)
        i += 1
    end_block()
    close_code()
    return "\n".join(out)


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
    options = {"html": False, "linkify": False, "typographer": False, "breaks": True}
    md = MarkdownIt("commonmark", options)
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
    return Markup(_MD.render(fence_unfenced_code(text or "")))
