"""docker-compose.yml stays consistent with the CLI, the settings and the GPU worker."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.main import get_command

from app.cli import cli

REPO = Path(__file__).resolve().parent.parent


def _compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())


def test_default_services_run_existing_cli_commands() -> None:
    commands = set(get_command(cli).commands)  # type: ignore[attr-defined]
    services = _compose()["services"]
    assert {"postgres", "web", "worker"} <= set(services)
    for name, service in services.items():
        if "build" not in service:
            continue
        argv = service["command"]
        assert argv[0] == "appellate", name
        assert argv[1] in commands, f"{name} runs unknown command {argv[1]!r}"


def test_services_share_the_database_and_the_worker_reserves_a_gpu() -> None:
    services = _compose()["services"]
    url = services["web"]["environment"]["APPELLATE_DATABASE_URL"]
    assert url.startswith("postgresql+psycopg://")
    assert services["worker"]["environment"]["APPELLATE_DATABASE_URL"] == url
    devices = services["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert services["web"]["depends_on"]["postgres"]["condition"] == "service_healthy"
