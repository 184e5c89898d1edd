"""Every form of the app has an identifier and a browser test that submits it.

The inventory is every ``<form>`` tag of ``templates/*.html`` (and any form the app's own
scripts in ``static/`` build), each named by its ``data-form`` attribute. Three checks:

- every form has a ``data-form``, unique across the templates;
- every identifier is passed, as a literal, to ``submit_form(page, "ID", ...)`` inside a test
  marked ``browser`` (found by reading the tests' syntax trees), and no test submits an
  identifier the templates lack;
- for the browser tests that ran in this pytest process (all of them in a one-process run,
  those of this worker under pytest-xdist), every form they submit was really submitted and
  answered without 4xx/5xx (``tests.support.form_support.SUBMITTED``, filled only after a
  successful submission).
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.form_support import RAN, SUBMITTED

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "templates"
STATIC = ROOT / "static"
TESTS = ROOT / "tests"

FORM_TAG = re.compile(r"<form\b[^>]*>", re.S | re.I)
FORM_ID = re.compile(r'\bdata-form="([^"]+)"')
# A form a script builds: document.createElement("form"), or markup with a <form tag.
JS_FORM = re.compile(r"""createElement\(\s*["']form["']\s*\)|<form\b""", re.I)
JS_FORM_ID = re.compile(
    r"""(?:setAttribute\(\s*["']data-form["']\s*,\s*|dataset\.form\s*=\s*|data-form=\\?")"""
    r"""["']?([\w-]+)"""
)


@dataclass(frozen=True)
class Form:
    """One form of the app: where it is written, and its identifier (None: missing)."""

    where: str
    form_id: str | None


def app_forms() -> list[Form]:
    """Every form tag of the templates and of the app's own scripts (not vendored ones)."""
    found: list[Form] = []
    for path in sorted(TEMPLATES.glob("*.html")):
        text = path.read_text()
        for tag in FORM_TAG.finditer(text):
            line = text.count("\n", 0, tag.start()) + 1
            ident = FORM_ID.search(tag.group(0))
            found.append(Form(f"templates/{path.name}:{line}", ident.group(1) if ident else None))
    for path in sorted(STATIC.glob("*.js")):
        text = path.read_text()
        built = list(JS_FORM.finditer(text))
        ids = JS_FORM_ID.findall(text)
        for k, match in enumerate(built):
            line = text.count("\n", 0, match.start()) + 1
            found.append(Form(f"static/{path.name}:{line}", ids[k] if k < len(ids) else None))
    return found


def _key(path: Path) -> str:
    """A test module's path under the repository (names repeat across test folders)."""
    return path.resolve().relative_to(ROOT).as_posix()


def _call_name(node: ast.Call) -> str | None:
    func = node.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)


def _is_browser_mark(node: ast.expr) -> bool:
    return "mark.browser" in ast.unparse(node)


def submitting_tests() -> dict[str, set[tuple[str, str]]]:
    """Form id -> the browser tests (module file, test function) that submit it.

    A call in a helper or fixture counts for every test of its module that reaches it
    through names (calls or fixture arguments), followed to a fixed point.
    """
    found: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for path in sorted(TESTS.rglob("test_*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        module_browser = any(
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets)
            and _is_browser_mark(node.value)
            for node in tree.body
        )
        functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        calls: dict[str, set[str]] = {}  # function -> form ids it submits directly
        uses: dict[str, set[str]] = {}  # function -> names it mentions (calls, fixtures)
        for name, fn in functions.items():
            calls[name] = {
                node.args[1].value
                for node in ast.walk(fn)
                if isinstance(node, ast.Call)
                and _call_name(node) == "submit_form"
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            }
            uses[name] = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} | {
                a.arg for a in fn.args.args
            }
        reach = {name: set(ids) for name, ids in calls.items()}
        changed = True
        while changed:
            changed = False
            for name in functions:
                for used in uses[name] & functions.keys() - {name}:
                    if not reach[used] <= reach[name]:
                        reach[name] |= reach[used]
                        changed = True
        for name, fn in functions.items():
            browser = module_browser or any(_is_browser_mark(d) for d in fn.decorator_list)
            if name.startswith("test_") and browser:
                for form_id in reach[name]:
                    found[form_id].add((_key(path), name))
    return dict(found)


def test_every_form_has_a_unique_identifier() -> None:
    forms = app_forms()
    assert len(forms) >= 30, f"only {len(forms)} forms found: is the template scan broken?"
    missing = [form.where for form in forms if form.form_id is None]
    assert not missing, f"forms without data-form: {missing}"
    where: dict[str, list[str]] = defaultdict(list)
    for form in forms:
        where[str(form.form_id)].append(form.where)
    twice = {ident: places for ident, places in where.items() if len(places) > 1}
    assert not twice, f"data-form identifiers used by more than one form: {twice}"


def test_every_form_has_a_browser_test_that_submits_it() -> None:
    inventory = {str(form.form_id) for form in app_forms()}
    tests = submitting_tests()
    unsubmitted = sorted(inventory - tests.keys())
    assert not unsubmitted, f"forms no browser test submits with submit_form: {unsubmitted}"
    unknown = sorted(tests.keys() - inventory)
    assert not unknown, f"browser tests submit forms the templates lack: {unknown}"


def test_the_browser_tests_of_this_run_submitted_their_forms() -> None:
    """Every form whose submitting browser test ran in this process was submitted without error.

    In one process (no xdist) that is every browser test that ran before this one (their
    folder sorts first); under pytest-xdist, those its worker ran.
    """
    inventory = {str(form.form_id) for form in app_forms()}
    ran = {
        form_id
        for form_id, tests in submitting_tests().items()
        if form_id in inventory and any(t in RAN for t in tests)
    }
    if not ran:
        pytest.skip("no browser test that submits a form ran in this process")
    not_submitted = sorted(ran - SUBMITTED.keys())
    assert not not_submitted, (
        f"forms whose browser tests ran but did not submit them successfully: {not_submitted}"
    )
