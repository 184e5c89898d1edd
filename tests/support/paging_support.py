"""Reading a list the dashboard shows a page at a time, as a user does: following "next"."""

from __future__ import annotations

import html
import re

from fastapi.testclient import TestClient


def next_href(page: str) -> str | None:
    """The page's ``rel="next"`` link, if it has one."""
    found = re.search(r'<a href="([^"]+)"[^>]*rel="next"', page)
    return None if found is None else html.unescape(found.group(1))


def every_page(client: TestClient, first: str, most: int = 50) -> list[str]:
    """``first`` and each page its "next" links lead to, in order (at most ``most``)."""
    out = [first]
    while (href := next_href(out[-1])) is not None:
        answer = client.get(href)
        assert answer.status_code == 200, answer.text
        out.append(answer.text)
        assert len(out) <= most, "the pages do not end"
    return out
