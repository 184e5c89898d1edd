"""The README walkthrough's screenshots, taken in headless Chromium from the demo data.

Builds a fresh demo store in a temporary directory (the bundled data that ``appellate demo``
imports, with its label-error rankers), runs one ``rank_errors`` job in this process so the jobs
page has something to show, serves the app with uvicorn on a free loopback port, and visits the
main pages with Playwright at 1400x900: as the demo's admin, and as an annotator for the review
queue's item page. The queue itself is built through the UI, from the label-errors list, as a
reviewer would. Writes one viewport PNG per entry of :data:`SHOTS` to ``docs/screenshots/``;
``tests/docs/test_screenshots.py`` checks that the README's walkthrough shows exactly these,
in this order. Run from the repository root (under a minute on two cores)::

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots] [--data data]

Needs Debian's ``chromium`` at ``/usr/bin/chromium`` (``scripts/test.sh`` installs it). Exits 1
when a page answered an error status or logged a console error (the PNGs are written anyway,
so the failing page can be looked at).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Run as a file, this script's folder comes first on sys.path; the repository root must come
# before any installed copy of `app` (an editable install may point at another checkout).
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from sqlalchemy import func, select  # noqa: E402

from app.settings import BUNDLED_DATA  # noqa: E402


@dataclass(frozen=True)
class Shot:
    """One screenshot: its file name (without ``.png``) and its title (the README's alt text)."""

    name: str
    title: str


# The walkthrough in the README's order; the test compares the README's images with this list.
SHOTS: tuple[Shot, ...] = (
    Shot("benchmarks", "The benchmarks"),
    Shot("instance-table", "JudgeBench's instance table"),
    Shot("pair-instance", "A pair's page"),
    Shot("metrics", "The metrics page"),
    Shot("label-errors", "MMLU-Redux's label-errors list"),
    Shot("choice-item", "A multiple-choice item"),
    Shot("queue", "A review queue"),
    Shot("queue-item", "An annotator's queue item"),
    Shot("jobs", "The jobs page"),
)

OUT = ROOT / "docs" / "screenshots"
VIEWPORT = {"width": 1400, "height": 900}
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
PAIRS = "judgebench"
CHOICES = "mmlu-redux"
ANNOTATOR = "ann"
# Votes the annotator casts before the item page is taken, so the queue page shows progress.
VOTES = 2
# A choice queue's keys 1..K vote the options in order.
LETTERS = "ABCDEFGHI"


def build_store(folder: Path, data: Path) -> Any:
    """A migrated SQLite store in ``folder`` holding the demo data; returns its settings.

    The database URL is given explicitly so that an ``APPELLATE_DATABASE_URL`` in the
    environment cannot point the script at a real store.
    """
    from app.cli.demo import load_demo_data
    from app.settings import Settings
    from app.store import Store

    settings = Settings(data_dir=folder, database_url=f"sqlite:///{folder / 'demo.sqlite3'}")
    store = Store.open(settings)
    try:
        for line in load_demo_data(store, data):
            print(line, flush=True)
        run_rank_errors_job(store)
    finally:
        store.close()
    return settings


def run_rank_errors_job(store: Any) -> None:
    """Queue one ``rank_errors`` job on MMLU-Redux and run it here, as a worker would."""
    from app.db import transaction
    from app.services.jobs.kind import create, enqueue
    from app.services.jobs.rank_errors import RankErrorsParams
    from workers.dispatch import HANDLERS
    from workers.runner import Worker

    with transaction(store.factory) as session:
        enqueue(session, create(session, RankErrorsParams, {"benchmark": CHOICES}))
    handlers = {"rank_errors": HANDLERS["rank_errors"]}
    Worker(store, handlers, device="cpu", log=lambda _: None).run(once=True)


def sign_in_secrets(settings: Any) -> tuple[str, str]:
    """One-time sign-in secrets for the demo's admin and for an annotator (created here)."""
    from app.cli.demo import demo_admin_link
    from app.db import transaction
    from app.services.accounts.users import create_user, issue_token
    from app.store import Store
    from app.tables import Role, TokenKind

    store = Store.open(settings)
    try:
        admin = demo_admin_link(store)
        with transaction(store.factory) as session:
            user = create_user(session, ANNOTATOR, Role.annotator.value)
            annotator, _ = issue_token(session, user, TokenKind.signin, label="screenshots")
    finally:
        store.close()
    return admin, annotator


def flipped_pair(settings: Any) -> str:
    """The external id of the shortest JudgeBench pair on which a judge flipped its verdict.

    A flip (the judge prefers the other response once the order is swapped) is what the pair
    page is for; the shortest one keeps both responses in view.
    """
    from app.db import transaction
    from app.services.evidence.benchmarks import get_benchmark
    from app.services.evidence.flips import FLIP_PREFIX
    from app.store import Store
    from app.tables import Instance, LabelEvent

    store = Store.open(settings, upgrade=False)
    try:
        with transaction(store.factory) as session:
            bench = get_benchmark(session, PAIRS)
            rows = session.execute(
                select(Instance.external_id, Instance.payload)
                .join(LabelEvent, LabelEvent.instance_id == Instance.id)
                .where(
                    Instance.benchmark_id == bench.id,
                    LabelEvent.label_name.startswith(FLIP_PREFIX),
                    LabelEvent.value == "1",
                )
            ).all()
            if not rows:  # no judge outputs in this data: any pair will do
                rows = session.execute(
                    select(Instance.external_id, Instance.payload)
                    .where(Instance.benchmark_id == bench.id)
                    .order_by(Instance.id)
                    .limit(50)
                ).all()
    finally:
        store.close()
    return min(rows, key=lambda row: (len(str(row.payload)), row.external_id)).external_id


def models_answer(settings: Any, external_id: str) -> str | None:
    """The answer most of the models gave on a choice item (the annotator's vote in the demo).

    On the label-errors list's items this often differs from the label, so the queue page's
    before-you-accept section has a change to show.
    """
    from app.db import transaction
    from app.services.evidence.benchmarks import get_benchmark
    from app.store import Store
    from app.tables import Instance, Prediction

    store = Store.open(settings, upgrade=False)
    try:
        with transaction(store.factory) as session:
            bench = get_benchmark(session, CHOICES)
            votes = func.count(Prediction.id)
            return session.scalar(
                select(Prediction.answer)
                .join(Instance, Prediction.instance_id == Instance.id)
                .where(Instance.benchmark_id == bench.id, Instance.external_id == external_id)
                .group_by(Prediction.answer)
                .order_by(votes.desc(), Prediction.answer)
                .limit(1)
            )
    finally:
        store.close()


def free_port() -> int:
    """A port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(settings: Any) -> Iterator[str]:
    """Serve the app for ``settings`` on a loopback port until the block ends; yields its URL."""
    import uvicorn

    from app.main import create_app

    port = free_port()
    config = uvicorn.Config(
        create_app(settings), host="127.0.0.1", port=port, log_level="warning", lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class Camera:
    """Pages signed in as one user; takes the screenshots and notes what went wrong."""

    def __init__(self, browser: Any, url: str, secret: str, out: Path, problems: list[str]) -> None:
        self.url, self.out, self.problems = url, out, problems
        self.context = browser.new_context(
            viewport=VIEWPORT, device_scale_factor=1, color_scheme="light", reduced_motion="reduce"
        )
        self.page = self.context.new_page()
        self.page.set_default_timeout(30_000)
        self.page.on("console", self._console)
        self.page.on("dialog", lambda d: (self.problems.append(f"dialog {d.message}"), d.dismiss()))
        self.page.goto(f"{url}/signin/{secret}")
        self.page.click("#use-link")
        self.page.wait_for_load_state()

    def _console(self, message: Any) -> None:
        if message.type == "error":
            self.problems.append(f"{self.page.url}: console error {message.text}")

    def visit(self, path: str) -> None:
        """Open ``path``; an error status is a problem of the walkthrough."""
        response = self.page.goto(self.url + path)
        if response is None or response.status >= 400:
            status = "no response" if response is None else response.status
            self.problems.append(f"{path}: {status}")
        self.settle()

    def settle(self) -> None:
        """Wait for the page's own requests (htmx sections, plots) and its fonts."""
        from playwright.sync_api import TimeoutError as PlaywrightTimeout

        # Pages polling a running job never go idle; nothing in the demo runs, but a cap keeps
        # such a page from hanging the script.
        with contextlib.suppress(PlaywrightTimeout):
            self.page.wait_for_load_state("networkidle", timeout=30_000)
        self.page.evaluate("document.fonts.ready")

    def shoot(self, name: str) -> None:
        """The viewport as ``<out>/<name>.png`` (the top of the page, as a visitor first sees)."""
        assert name in {s.name for s in SHOTS}, name
        path = self.out / f"{name}.png"
        self.page.screenshot(path=str(path), animations="disabled", caret="hide")
        print(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}", flush=True)


@dataclass(frozen=True)
class Demo:
    """What the walk needs from the store, read before the server starts (no second writer)."""

    settings: Any
    admin_secret: str
    annotator_secret: str
    pair: str


def walk(browser: Any, url: str, demo: Demo, out: Path) -> list[str]:
    """Take every screenshot of :data:`SHOTS`; returns the problems seen on the way."""
    from playwright.sync_api import expect

    from app.web.urls import instance_url

    problems: list[str] = []
    admin = Camera(browser, url, demo.admin_secret, out, problems)
    page = admin.page

    admin.visit("/")
    admin.shoot("benchmarks")
    admin.visit(f"/benchmarks/{PAIRS}")
    admin.shoot("instance-table")
    admin.visit(instance_url(PAIRS, demo.pair))
    admin.shoot("pair-instance")
    admin.visit(f"/benchmarks/{PAIRS}/metrics")
    admin.shoot("metrics")

    # The label-errors list and its top item, reached by its link as a reviewer would.
    admin.visit(f"/benchmarks/{CHOICES}/disagreements")
    admin.shoot("label-errors")
    page.locator("table.disagreements tbody tr td.id a").first.click()
    page.wait_for_url(re.compile(r"/instances/"))
    admin.settle()
    admin.shoot("choice-item")

    # A queue from the list, through its form: one annotator per item, with instructions.
    admin.visit(f"/benchmarks/{CHOICES}/disagreements")
    page.locator("a.queue-link").first.click()
    page.wait_for_url(re.compile(r"/queues/new"))
    form = page.locator("form.queue-form")
    form.locator("input[name=name]").fill("Suspect MMLU-Redux labels")
    form.locator("input[name=overlap_k]").fill("1")
    form.locator("textarea[name=instructions]").fill(
        "Pick the **correct option** (keys 1-4), or an outcome when none or several are right."
    )
    form.locator("button[type=submit]").click()
    page.wait_for_url(re.compile(r"/queues/\d+$"))
    queue_id = int(page.url.rstrip("/").rsplit("/", 1)[1])

    # The annotator votes on the first items by key (here: the models' most common answer),
    # then the next item is what they see.
    annotator = Camera(browser, url, demo.annotator_secret, out, problems)
    annotator.visit(f"/queues/{queue_id}/next")
    heading = annotator.page.locator("h1.id")
    for _ in range(VOTES):
        external_id = heading.inner_text()
        answer = models_answer(demo.settings, external_id) or "A"
        key = str(LETTERS.index(answer) + 1) if len(answer) == 1 and answer in LETTERS else "1"
        annotator.page.locator("body").press(key)
        expect(heading).not_to_have_text(external_id)
    annotator.settle()
    annotator.shoot("queue-item")
    annotator.context.close()

    admin.visit(f"/queues/{queue_id}")
    admin.shoot("queue")
    admin.visit("/jobs")
    admin.shoot("jobs")
    admin.context.close()
    return problems


def report_sizes(out: Path) -> int:
    """Print each PNG's size; returns the total in bytes."""
    total = 0
    for shot in SHOTS:
        size = (out / f"{shot.name}.png").stat().st_size
        total += size
        print(f"{size / 1024:8.0f} KiB  {shot.name}.png")
    print(f"{total / 1024:8.0f} KiB  in all")
    return total


def main(argv: list[str] | None = None) -> int:
    """Build the demo store, serve it, take the screenshots; 1 when a page misbehaved."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="folder for the PNGs")
    parser.add_argument("--data", type=Path, default=BUNDLED_DATA, help="the demo's data folder")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        parser.error(f"{CHROMIUM} missing: apt-get install chromium")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="appellate-shots-") as folder:
        settings = build_store(Path(folder), args.data)
        demo = Demo(settings, *sign_in_secrets(settings), pair=flipped_pair(settings))
        print(f"demo store built in {time.monotonic() - started:.0f} s", flush=True)
        with serving(settings) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                problems = walk(browser, url, demo, args.out)
            finally:
                browser.close()
    report_sizes(args.out)
    print(f"done in {time.monotonic() - started:.0f} s", flush=True)
    for problem in problems:
        print(f"problem: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
