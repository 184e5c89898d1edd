"""Model text rendered as Markdown stays inert: no raw HTML, no unsafe links, no loaded images."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any

import pytest

from app.db import transaction
from app.settings import Settings
from app.tables import Benchmark, Instance
from app.web.markdown import render_markdown, safe_link
from tests.support.auth_support import api_client

# Every way into the page the renderer must close: raw HTML, handlers, unsafe link schemes
# (plain, mixed case, entity- and whitespace-obfuscated), autolinks, images with handlers.
XSS_CORPUS = "\n\n".join(
    [
        "<script>window.__pwned = 1</script>",
        '<img src=x onerror="window.__pwned = 2">',
        "<svg onload=\"window.__pwned = 3\"></svg> <iframe src='javascript:1'></iframe>",
        "[click](javascript:window.__pwned=4)",
        "[mixed](JaVaScRiPt:window.__pwned=5)",
        "[entity](jav&#x09;ascript:window.__pwned=6)",
        "[spaced]( javascript:window.__pwned=7 )",
        "[data](data:text/html;base64,PHNjcmlwdD53aW5kb3cuX19wd25lZD04PC9zY3JpcHQ+)",
        "[vb](vbscript:msgbox(1))",
        "<javascript:window.__pwned=9>",
        '![pic" onerror="window.__pwned=10](https://example.org/x.png)',
        "![inline](data:image/png;base64,iVBORw0KGgo=)",
        '[title](https://example.org "x\\" onmouseover=\\"window.__pwned=11")',
        "$\\href{javascript:window.__pwned=12}{click}$",
        "<a href='javascript:window.__pwned=13'>a</a>",
        "[ok](https://example.org/page)",
    ]
)


def _hrefs(html: str) -> list[str]:
    return re.findall(r'href="([^"]*)"', html)


class _Tags(HTMLParser):
    """Every start tag of a document with its attribute names, as a browser would read them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, [name for name, _ in attrs]))


def _live_markup(html: str) -> list[str]:
    """Tags that could run or load something, and event-handler attributes, in ``html``."""
    parser = _Tags()
    parser.feed(html)
    bad = {"script", "img", "svg", "iframe", "object", "embed", "style", "link", "meta"}
    return [
        f"{tag}[{name}]" if name else tag
        for tag, names in parser.tags
        for name in ([n for n in names if n.startswith("on")] or [""])
        if name or tag in bad
    ]


def test_corpus_renders_without_tags_handlers_or_unsafe_links() -> None:
    html = str(render_markdown(XSS_CORPUS))
    # Tags and handlers only ever appear as escaped text, never as markup.
    assert _live_markup(html) == []
    assert all(safe_link(h) and h.startswith(("https://", "/")) for h in _hrefs(html))
    assert "https://example.org/page" in _hrefs(html)
    assert "&lt;script&gt;" in html


def test_images_become_links_that_load_nothing() -> None:
    html = str(render_markdown("![a chart](https://example.org/c.png) ![x](javascript:alert(1))"))
    assert "<img" not in html
    assert '<a class="md-image" href="https://example.org/c.png"' in html
    assert "[image: a chart]" in html and "javascript:" not in _hrefs(html)


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://a.b/c", True),
        ("http://a.b", True),
        ("mailto:x@y.z", True),
        ("/relative?q=1#f", True),
        ("#anchor", True),
        ("javascript:alert(1)", False),
        ("JAVASCRIPT:alert(1)", False),
        (" java\tscript:alert(1)", False),
        ("data:text/html,hi", False),
        ("vbscript:x", False),
        ("file:///etc/passwd", False),
    ],
)
def test_safe_link(url: str, ok: bool) -> None:
    assert safe_link(url) is ok


def test_markdown_and_math_spans() -> None:
    html = str(render_markdown("**b** $x_1 * y_2$ and $$\\frac{a}{b}$$ \\(c\\) \\[d\\] `$e$`"))
    assert "<strong>b</strong>" in html
    assert '<span class="math">$x_1 * y_2$</span>' in html  # no emphasis inside math
    assert '<span class="math math-display">$$\\frac{a}{b}$$</span>' in html
    assert '<span class="math">\\(c\\)</span>' in html
    assert '<span class="math math-display">\\[d\\]</span>' in html
    assert "<code>$e$</code>" in html


def test_prices_are_not_math() -> None:
    assert "math" not in str(render_markdown("It costs $5 and $10, or $ 3 $."))


def test_math_source_is_escaped() -> None:
    html = str(render_markdown("$<script>alert(1)</script>$"))
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_instance_page_renders_the_corpus_inert(settings: Settings, factory: Any) -> None:
    """The page around the rendered text: formatted, escaped raw copy, no live markup."""
    with transaction(factory) as session:
        bench = Benchmark(name="md-web", kind="pairwise", description="", data_version=1)
        session.add(bench)
        session.flush()
        payload = {"prompt": "**Q** $x$", "response_a": XSS_CORPUS, "response_b": "plain"}
        session.add(
            Instance(benchmark_id=bench.id, external_id="x", group_key="x", payload=payload)
        )
    with api_client(settings) as client:
        page = client.get("/benchmarks/md-web/instances/x").text
    main = page[page.index('<main id="main">') :]
    assert "<strong>Q</strong>" in main and '<span class="math">$x$</span>' in main
    # The page's own scripts sit in <head>; nothing live comes from the model's text.
    assert _live_markup(main) == []
    assert all(
        not h.lower().lstrip().startswith(("javascript", "data", "vbscript")) for h in _hrefs(main)
    )
    # The raw copy is the text itself, escaped.
    assert '<div class="raw-text" hidden>&lt;script&gt;window.__pwned = 1&lt;/script&gt;' in main


# Issue 21 item 6: a LiveCodeBench response as JudgeBench stores it, code without a fence.
UNFENCED = (
    "# YOUR CODE HERE\n"
    "def can_form(n, k, s):\n"
    "    from collections import Counter\n"
    "    \n"
    "    # Count each character\n"
    "    freq = Counter(s)\n"
    "    return sum(1 for c in freq.values() if c % 2) <= k + 1\n"
    "\n"
    "import sys\n"
    "data = sys.stdin.read().split()\n"
    "for _ in range(int(data[0])):\n"
    '    print("YES" if can_form(1, 2, "<b>x</b>") else "NO")'
)


def _pre_blocks(html: str) -> list[str]:
    from html import unescape

    return [unescape(b) for b in re.findall(r"<pre><code>(.*?)</code></pre>", html, flags=re.S)]


def test_unfenced_code_keeps_its_lines_and_indentation() -> None:
    html = str(render_markdown(UNFENCED))
    # One block, exactly the text (blank and whitespace-only lines included), escaped.
    assert _pre_blocks(html) == [UNFENCED + "\n"]
    assert "<h1>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html and "<b>" not in html


def test_code_after_prose_is_fenced_and_the_prose_stays_markdown() -> None:
    text = "Here is **my** solution:\n\nx = int(input())\nprint(x * 2)\n\nIt doubles `x`."
    html = str(render_markdown(text))
    assert _pre_blocks(html) == ["x = int(input())\nprint(x * 2)\n"]
    assert "<strong>my</strong>" in html and "<code>x</code>" in html


def test_single_line_breaks_are_kept_in_prose() -> None:
    html = str(render_markdown("Step 1: read.\nStep 2: add."))
    assert html.strip() == "<p>Step 1: read.<br />\nStep 2: add.</p>"


@pytest.mark.parametrize(
    "text",
    [
        "- first\n  x = 1\n  y = 2",  # a list, even with code-like continuation lines
        "## Findings\n- **Vitals:**\n  - Temperature: 38.9\n  - Pulse: 60",  # an outline
        "Solve\n$$x = 1$$\ny = 2",  # display math
        "The answer is x.\nSo we are done.",  # prose
        "x = 1",  # one line alone
        "```py\nx = 1\ny = 2\n```",  # already fenced
    ],
)
def test_text_that_is_not_unfenced_code_is_left_to_markdown(text: str) -> None:
    html = str(render_markdown(text))
    assert len(re.findall("<pre>", html)) == text.count("```") // 2


def test_a_fence_inside_guessed_code_cannot_close_it() -> None:
    code = 'a = "``` `"\nb = 1;\nc = 2;'
    assert _pre_blocks(str(render_markdown(code))) == [code + "\n"]
