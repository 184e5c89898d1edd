"""The README's walkthrough shows the screenshots ``scripts/screenshots.py`` takes (issue 21: 13).

No browser here: the script is run by hand when pages change. These checks keep the README,
the script's list and the committed PNGs from drifting apart: every image the walkthrough
shows exists, is a viewport shot, and the walkthrough shows exactly the script's pages, in the
script's order, with the script's titles as alt text.
"""

from __future__ import annotations

import importlib.util
import re
import struct
import sys
from pathlib import Path
from types import ModuleType

from tests.conftest import REPO

SECTION = "## A walk through the product"
IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")
# Committed binaries stay small: the issue asks for about 2 MB in all.
MAX_TOTAL_BYTES = 2_500_000


def _script() -> ModuleType:
    """``scripts/screenshots.py`` as a module (importing it runs nothing)."""
    path = REPO / "scripts" / "screenshots.py"
    spec = importlib.util.spec_from_file_location("appellate_screenshots_script", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered first: dataclasses look their module up while the class is made.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _walkthrough() -> list[tuple[str, str]]:
    """(alt text, path) of each image in the README's walkthrough section, in order."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert SECTION in readme, f"the README has no section {SECTION!r}"
    section = readme.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return IMAGE.findall(section)


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's header."""
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    width, height = struct.unpack(">II", head[16:24])
    return width, height


def test_every_readme_image_exists() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for _, target in IMAGE.findall(readme):
        if "://" not in target:
            assert (REPO / target).is_file(), target


def test_the_walkthrough_shows_the_scripts_pages_in_order() -> None:
    script = _script()
    shown = _walkthrough()
    expected = [
        (shot.title, f"{script.OUT.relative_to(REPO).as_posix()}/{shot.name}.png")
        for shot in script.SHOTS
    ]
    assert shown == expected


def test_the_screenshots_are_viewport_pngs_and_small() -> None:
    script = _script()
    paths = [script.OUT / f"{shot.name}.png" for shot in script.SHOTS]
    viewport = (script.VIEWPORT["width"], script.VIEWPORT["height"])
    assert {p.name: _png_size(p) for p in paths} == {p.name: viewport for p in paths}
    assert sum(p.stat().st_size for p in paths) < MAX_TOTAL_BYTES
    # No stale image left behind by a renamed page.
    assert sorted(script.OUT.glob("*.png")) == sorted(paths)
