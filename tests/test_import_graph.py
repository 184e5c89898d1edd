"""The layering rules (tests/support/layering.py) hold on the real tree, and each can fail.

Each rule runs on the import graph of ``app`` and ``workers``. To show that a rule is not
vacuous, a small package tree is written with the same folder names: a legal skeleton every
rule accepts, then the skeleton plus one breaking import, which that rule must refuse.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import grimp
import pytest

from tests.conftest import REPO
from tests.support.layering import RULES, Roots

HEAVY_AT_START = ("torch", "transformers", "sklearn", "scipy", "pandas")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("app", "workers", include_external_packages=True, cache_dir=None)


def test_the_graph_sees_the_layers(graph: grimp.ImportGraph) -> None:
    # Guards the rules against passing on a graph that misses what they look at.
    wings = {"evidence", "accounts", "jobs", "table", "metrics", "disagreements", "review"}
    assert {f"app.services.{w}" for w in wings} <= graph.modules
    assert {"app.sql", "app.cli", "app.stats", "workers.jobs", "workers.engines"} <= graph.modules
    assert graph.direct_import_exists(importer="app.web.api", imported="app.services.table.browse")
    assert graph.direct_import_exists(importer="workers.engines.models", imported="torch")


@pytest.mark.parametrize("rule", sorted(RULES))
def test_the_tree_keeps_the_rule(graph: grimp.ImportGraph, rule: str) -> None:
    violations = RULES[rule](graph, Roots())
    assert not violations, f"{rule}: {RULES[rule].__doc__}\n" + "\n".join(violations)


# A legal tree with every folder the rules name: each module imports only what it may.
SKELETON = {
    "{a}/cli/__init__.py": "import {w}.cli.tool\nimport {a}.main\n",
    "{a}/main.py": "import {a}.web.pages\n",
    "{a}/web/pages.py": "import {a}.ingest.export.release\nimport {a}.services.review.queues\n",
    "{a}/ingest/reader.py": "import {a}.services.evidence.labels\nimport {a}.sql.bulk\n",
    "{a}/ingest/export/release.py": "import {a}.services.table.browse\n",
    "{a}/services/review/queues.py": "import {a}.services.jobs.judge\n",
    "{a}/services/jobs/judge.py": "import {a}.services.disagreements.lists\n",
    "{a}/services/disagreements/lists.py": "import {a}.services.metrics.matrix\n",
    "{a}/services/metrics/matrix.py": "import {a}.services.table.browse\nimport {a}.stats.m\n",
    "{a}/services/table/browse.py": "import {a}.services.evidence.labels\n",
    "{a}/services/evidence/labels.py": "import {a}.sql.bulk\n",
    "{a}/services/accounts/users.py": "import {a}.sql.bulk\n",
    "{a}/sql/bulk.py": "import sqlalchemy\n",
    "{a}/stats/m.py": "import numpy\n",
    "{w}/cli/tool.py": "import {w}.dispatch\n",
    "{w}/dispatch.py": "import {w}.jobs.judge\n",
    "{w}/jobs/judge.py": "import {w}.runner\nimport {a}.services.jobs.judge\n",
    "{w}/runner.py": "import {w}.engines.capture\n",
    "{w}/engines/capture.py": "import torch\n",
}
# One import per rule that breaks it (added to the skeleton as one more module).
BREAKS = {
    "services_wings": ("{a}/services/evidence/peek.py", "import {a}.services.table.browse\n"),
    "app_layers": ("{a}/sql/upward.py", "import {a}.services.evidence.labels\n"),
    "worker_layers": ("{w}/engines/upward.py", "import {w}.jobs.judge\n"),
    "services_below_ingest_web_cli": (
        "{a}/services/metrics/reads.py",
        "import {a}.ingest.reader\n",
    ),
    "web_imports_ingest_only_for_export": ("{a}/web/upload.py", "import {a}.ingest.reader\n"),
    "workers_never_import_web": ("{w}/jobs/plot.py", "import {a}.web.pages\n"),
    "nothing_in_app_imports_torch": ("{a}/services/jobs/gpu.py", "import torch\n"),
    "only_the_cli_imports_workers": ("{a}/web/run.py", "import {w}.runner\n"),
    "stats_is_pure_numerics": ("{a}/stats/db.py", "import sqlalchemy\n"),
    "no_cycles_in_services": (
        "{a}/services/evidence/labels.py",
        "import {a}.sql.bulk\nimport {a}.services.evidence.flips\n",
    ),
}
EXTRA = {
    "no_cycles_in_services": {
        "{a}/services/evidence/flips.py": "import {a}.services.evidence.labels\n"
    }
}


def _write_tree(root: Path, roots: Roots, files: dict[str, str]) -> None:
    for pattern, source in files.items():
        path = root / pattern.format(a=roots.app, w=roots.workers)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source.format(a=roots.app, w=roots.workers))
    # Every folder a package, as in the real tree.
    for top in (roots.app, roots.workers):
        for folder in [root / top, *(p for p in (root / top).rglob("*") if p.is_dir())]:
            (folder / "__init__.py").touch(exist_ok=True)


def _graph_of(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, files: dict[str, str]) -> tuple:
    # Fresh top names each time: the import system caches where a package was found.
    tag = uuid.uuid4().hex[:8]
    roots = Roots(app=f"fake{tag}_app", workers=f"fake{tag}_workers")
    _write_tree(tmp_path, roots, files)
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph(
        roots.app, roots.workers, include_external_packages=True, cache_dir=None
    )
    return graph, roots


def test_the_skeleton_keeps_every_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    graph, roots = _graph_of(tmp_path, monkeypatch, SKELETON)
    assert len(graph.modules) > 25
    for name, rule in RULES.items():
        assert rule(graph, roots) == [], name


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_rule_refuses_a_breaking_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rule: str
) -> None:
    where, source = BREAKS[rule]
    graph, roots = _graph_of(
        tmp_path, monkeypatch, {**SKELETON, where: source, **EXTRA.get(rule, {})}
    )
    violations = RULES[rule](graph, roots)
    assert violations, f"{rule} accepted {where.format(a=roots.app, w=roots.workers)}"
    # The report names the module that broke the rule.
    broken = where.format(a=roots.app, w=roots.workers).removesuffix(".py").replace("/", ".")
    named = {broken, broken.rsplit(".", 1)[0] + ".flips"}
    assert any(any(n in line for n in named) for line in violations), violations


def test_every_rule_has_a_breaking_package() -> None:
    assert sorted(BREAKS) == sorted(RULES)


def test_importing_the_cli_loads_no_worker_module() -> None:
    # -X importtime lists every module the import loads, lazy command modules excluded.
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import app.cli"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        check=True,
    )
    loaded = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if "|" in line}
    assert "app.cli" in loaded and "typer" in loaded
    workers = sorted(m for m in loaded if m == "workers" or m.startswith("workers."))
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY_AT_START)
    assert not workers, f"import app.cli loads {workers}"
    assert not heavy, f"import app.cli loads {heavy}"
