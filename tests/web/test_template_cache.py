"""Compiled templates are shared by the apps of a process; an edited template is recompiled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jinja2 import Environment

from app.web.templating import make_templates


def _compiles(monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """The template names Jinja compiles from source from now on."""
    compiled: list[str | None] = []
    original = Environment.compile

    def counting(self: Environment, source: Any, name: str | None = None, *a: Any, **k: Any) -> Any:
        compiled.append(name)
        return original(self, source, name, *a, **k)

    monkeypatch.setattr(Environment, "compile", counting)
    return compiled


def test_a_second_app_reuses_the_first_apps_compiled_templates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    template = tmp_path / "page.html"
    template.write_text("<p>{{ text }}</p>")
    compiled = _compiles(monkeypatch)
    first = make_templates(tmp_path).env.get_template("page.html")
    assert compiled == ["page.html"]
    second = make_templates(tmp_path).env.get_template("page.html")
    assert compiled == ["page.html"], "the second environment compiled the template again"
    # Autoescaping is part of the kept code: model text stays escaped in both.
    for loaded in (first, second):
        assert loaded.render(text="<script>") == "<p>&lt;script&gt;</p>"


def test_an_edited_template_is_compiled_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    template = tmp_path / "page.html"
    template.write_text("<p>{{ text }}</p>")
    make_templates(tmp_path).env.get_template("page.html")
    template.write_text("<b>{{ text }}</b>")
    compiled = _compiles(monkeypatch)
    loaded = make_templates(tmp_path).env.get_template("page.html")
    assert compiled == ["page.html"]
    assert loaded.render(text="x") == "<b>x</b>"
