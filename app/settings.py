"""The one settings class (environment prefix ``APPELLATE_``), built once and passed in."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

# The real data shipped with the repository (each folder with its SOURCE.md): the demo's
# imports and the lie-detector dataset builders read it by default.
BUNDLED_DATA = Path(__file__).resolve().parent.parent / "data"


class Settings(BaseSettings):
    """Runtime configuration for the web server, the CLI and the workers."""

    model_config = SettingsConfigDict(env_prefix="APPELLATE_", extra="ignore")

    data_dir: Path = Field(default=Path("./appellate-data"))
    database_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    page_size: int = 50
    # Threads that serve the instance table and instance pages (app/web/lane.py): page work
    # is CPU-bound under one GIL, and more threads only pass the GIL around.
    page_threads: int = Field(default=2, ge=1)
    sqlite_busy_timeout_ms: int = 30_000
    # torch CPU threads of a job worker; None: the cores this process may run on
    # (os.sched_getaffinity). On a shared machine fewer threads than cores can be faster.
    worker_threads: int | None = Field(default=None, ge=1)
    # Labelled items up to which the metrics page computes a missing result in the request;
    # above, a compute_metrics job does (app.services.metrics.metric_results).
    metrics_inline_items: int = Field(default=50_000, ge=0)
    # The largest file the New benchmark page accepts (bytes); bigger ones go through the CLI.
    upload_max_bytes: int = Field(default=512 * 2**20, ge=1)
    # Proxies whose X-Forwarded-For is believed (uvicorn's forwarded_allow_ips, e.g.
    # "10.0.0.5" or "*"); empty: none, the peer's address is the client's (sign-in throttle).
    forwarded_allow_ips: str = ""
    # Fewest groups (resampling units) a bootstrap interval is shown for; below, every page
    # and the API say "too few groups for an interval" (app.stats.bootstrap.too_few_groups).
    min_interval_groups: int = Field(default=10, ge=1)

    @property
    def resolved_database_url(self) -> str:
        """The database URL, defaulting to a SQLite file inside ``data_dir``."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'appellate.sqlite3').resolve()}"
