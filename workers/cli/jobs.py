"""``appellate worker``, ``judge``, ``extract`` and ``jobs ...``: run and follow background jobs.

A command with ``--wait`` runs its own job in this process when no worker has claimed it (through
the same claim, lease and handler as a worker), otherwise follows the worker's progress.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from app.cli.support import echo_rows, in_store, open_store
from app.db import transaction
from app.errors import InvalidInput
from app.services.jobs import queue as job_queue
from app.services.jobs.extract import ExtractParams
from app.services.jobs.judge import JudgeParams
from app.services.jobs.kind import JobParams, create, enqueue
from app.services.jobs.rejudge import RejudgeParams
from app.settings import Settings
from app.store import Store
from app.tables import Job

P = TypeVar("P")

jobs_app = typer.Typer(no_args_is_help=True, help="List, follow, cancel and retry background jobs.")


def job_row(job: Job) -> dict[str, Any]:
    """A job as plain JSON."""
    return {
        "id": job.id,
        "kind": job.kind,
        "status": job.status,
        "progress": [job.progress_done, job.progress_total],
        "attempts": job.attempts,
        "max_attempts": job.max_attempts,
        "lease_losses": job.lease_losses,
        "params": job.params,
        "error": job.error,
        "result": job.result,
    }


def _handlers() -> dict[str, Any]:
    # Imported late: the handlers pull in torch, which plain job listing never needs.
    from workers.dispatch import HANDLERS

    return HANDLERS


def _bar(done: int, total: int | None, status: str, width: int = 30) -> str:
    if not total:
        return f"{status}: {done} done"
    filled = int(width * done / total)
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {status}"


def _stop_on_signals(event: threading.Event) -> None:
    def handler(_signum: int, _frame: Any) -> None:
        event.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def wait_for_job(store: Store, job_id: int, *, device: str, lease_seconds: float = 60.0) -> Job:
    """Run job ``job_id`` here if it is still queued, else follow it; return it when finished."""
    from workers.runner import Worker

    worker = Worker(
        store,
        _handlers(),
        device=device,
        lease_seconds=lease_seconds,
        log=lambda _line: None,
    )
    _stop_on_signals(worker.shutdown)
    claimed = worker.claim(job_id)
    runner = None
    if claimed is not None:
        runner = threading.Thread(target=worker.execute, args=(claimed,), daemon=True)
        runner.start()
    last = ""
    while True:
        with transaction(store.factory) as session:
            job = job_queue.get_job(session, job_id)
        line = _bar(job.progress_done, job.progress_total, job.status)
        if line != last and sys.stderr.isatty():
            sys.stderr.write("\r" + line)
        elif line != last:
            sys.stderr.write(line + "\n")
        last = line
        # Our own runner ends with the job (or with a Ctrl-C, which requeues it); a job run by a
        # worker elsewhere is followed until it finishes.
        if runner is not None and not runner.is_alive():
            break
        if runner is None and (job.status in job_queue.FINISHED or worker.shutdown.is_set()):
            break
        time.sleep(0.5)
    if runner is not None:
        runner.join()
    sys.stderr.write("\n")
    with transaction(store.factory) as session:
        return job_queue.get_job(session, job_id)


def submit(
    enqueue: Callable[[Session], Job],
    wait: bool,
    device: str,
    show: Callable[[Job], None] | None = None,
) -> None:
    """Queue a job in one transaction; with ``wait`` run or follow it and print it as JSON.

    ``show`` prints a finished (``done``) job its own way instead.
    """
    job_id = in_store(lambda s: enqueue(s).id)
    # With --wait, stdout carries the result alone (JSON a script can parse whole); the job
    # number goes beside the progress bar on stderr.
    typer.echo(f"job {job_id} queued", err=wait)
    if not wait:
        return
    store = open_store(Settings())
    try:
        job = wait_for_job(store, job_id, device=device)
    finally:
        store.close()
    if show is not None and job.status == "done":
        show(job)
    else:
        typer.echo(json.dumps(job_row(job), indent=2))
    if job.status != "done":
        raise typer.Exit(1)


WaitOption = Annotated[bool, typer.Option("--wait", help="Run or follow the job to its end.")]
DeviceOption = Annotated[str, typer.Option("--device", help="auto, cpu or cuda:N (--wait).")]
MaxAttemptsOption = Annotated[
    int,
    typer.Option(
        "--max-attempts",
        min=1,
        help="Failures of the job's code before it fails for good (workers killed under it "
        f"count apart, up to {job_queue.MAX_LEASE_LOSSES}).",
    ),
]


def detector_name_option(flag: str, default: str) -> Any:
    """The option naming the detector a run writes under (empty: ``default``)."""
    return Annotated[str, typer.Option(flag, help=f"Detector name (default {default}).")]


JudgeNameOption = detector_name_option("--judge", "MODEL/MODE")


def _orders(text: str) -> list[str]:
    return [o.strip() for o in text.split(",") if o.strip()]


def parse_option(ctx: typer.Context, params_type: type[JobParams], field: str, text: str) -> Any:
    """``text`` given to the option of ``field`` as that field's type (a usage error if not)."""
    try:
        return params_type.parse_form({field: text})[field]
    except InvalidInput as exc:
        raise typer.BadParameter(exc.reason, ctx=ctx, param_hint=_option_of(ctx, field)) from None


def _option_of(ctx: typer.Context, field: str | None) -> str:
    """The command-line spelling of a parameter: the option that sets ``field``, else its name."""
    for param in ctx.command.params:
        if param.name == field and getattr(param, "opts", None):
            return str(param.opts[0])
    return f"--{field.replace('_', '-')}" if field else "the parameters"


def template_option(template_file: typer.FileText | None) -> dict[str, Any]:
    """The ``template`` parameter read from a ``--template`` file, or nothing (the default)."""
    return {} if template_file is None else {"template": template_file.read()}


def submit_options(
    ctx: typer.Context,
    params_type: type[JobParams],
    show: Callable[[Job], None] | None = None,
    **given: Any,
) -> None:
    """Queue the job whose parameters are the command's options of the same names.

    ``given`` adds the parameters the command computes or names differently (and overrides
    an option of the same name). The parameters are built before anything is queued: a bad
    value is a usage error naming its option (exit 2). ``--wait`` and ``--device`` are the
    command's own, as for :func:`submit`, and so is ``--max-attempts`` where the command has it.
    """
    wanted = {f.name for f in dataclasses.fields(params_type)}
    data = {name: value for name, value in ctx.params.items() if name in wanted} | given
    attempts = ctx.params.get("max_attempts")

    def queue(session: Session) -> Job:
        try:
            return enqueue(session, create(session, params_type, data), max_attempts=attempts)
        except InvalidInput as exc:
            raise typer.BadParameter(
                exc.reason, ctx=ctx, param_hint=_option_of(ctx, exc.field)
            ) from None

    submit(queue, ctx.params["wait"], ctx.params["device"], show)


def judge(
    benchmark: Annotated[str, typer.Argument(help="A pairwise benchmark.")],
    model: Annotated[str, typer.Option("--model", help="Registered model (or remote model id).")],
    judge_name: JudgeNameOption = "",
    orders: Annotated[str, typer.Option("--orders", help="AB, BA or AB,BA.")] = "AB,BA",
    repeat_subset: Annotated[
        int, typer.Option("--repeat-subset", help="Judge AB again on N of the pairs.")
    ] = 0,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit", help="A seeded sample of N pairs (those other detectors scored first)."
        ),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the --limit sample.")] = 0,
    mode: Annotated[
        str | None,
        typer.Option(
            "--mode",
            help="generate (strict format), forced (label argmax) or calibrated (label argmax "
            "minus the content-free prior); default: the model's.",
        ),
    ] = None,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens")] = 256,
    reasoning_tokens: Annotated[
        int, typer.Option("--reasoning-tokens", help="Forced mode: reasoning generated first.")
    ] = 0,
    batch_size: Annotated[int, typer.Option("--batch-size")] = 4,
    capture: Annotated[
        bool, typer.Option("--capture/--no-capture", help="Keep AB pre-verdict activations.")
    ] = True,
    verify: Annotated[
        int, typer.Option("--verify", help="Replay N AB judgments by a teacher-forced forward.")
    ] = 0,
    base_url: Annotated[
        str | None,
        typer.Option("--base-url", help="OpenAI-compatible server (remote backend)."),
    ] = None,
    context_budget: Annotated[
        int | None,
        typer.Option(
            "--context-budget",
            help="Tokens a prompt and the judge's output may take (default: the model's "
            "window); longer pairs are refused and counted, never truncated.",
        ),
    ] = None,
    template_file: Annotated[
        typer.FileText | None,
        typer.Option("--template", help="File with the user-message template."),
    ] = None,
    wait: WaitOption = False,
    device: DeviceOption = "auto",
    max_attempts: MaxAttemptsOption = job_queue.DEFAULT_MAX_ATTEMPTS,
    *,
    ctx: typer.Context,
) -> None:
    """Judge a pairwise benchmark in both orders with a local or remote model."""
    submit_options(
        ctx,
        JudgeParams,
        judge=judge_name,
        backend="remote" if base_url else "local",
        orders=_orders(orders),
        mode=mode,
        **template_option(template_file),
    )


def rejudge(
    benchmark: Annotated[str, typer.Argument(help="A pairwise benchmark.")],
    judge: Annotated[str, typer.Option("--judge", help="The judge that judged in one order.")],
    budget: Annotated[int, typer.Option("--budget", help="Pairs to re-judge (extra calls).")],
    ranker: Annotated[
        str,
        typer.Option(
            "--ranker",
            help="Frozen flip probe, detector with scores, or random (default: the judge's "
            "frozen flip probe).",
        ),
    ] = "",
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random order and ties.")] = 0,
    model: Annotated[
        str, typer.Option("--model", help="The judge's model, for imported judgments.")
    ] = "",
    base_url: Annotated[
        str | None, typer.Option("--base-url", help="OpenAI-compatible server of --model.")
    ] = None,
    batch_size: Annotated[int, typer.Option("--batch-size")] = 4,
    wait: WaitOption = False,
    device: DeviceOption = "auto",
    max_attempts: MaxAttemptsOption = job_queue.DEFAULT_MAX_ATTEMPTS,
    *,
    ctx: typer.Context,
) -> None:
    """Re-judge in the other order only the one-order pairs a flip ranker flags first."""
    submit_options(ctx, RejudgeParams)


def extract(
    benchmark: Annotated[str, typer.Argument(help="Benchmark whose instances are captured.")],
    model: Annotated[str, typer.Option("--model", help="Registered model.")],
    fmt: Annotated[str, typer.Option("--format", help="chat or text.")] = "chat",
    position: Annotated[
        str, typer.Option("--position", help="last, end_of_turn or before_marker:<text>.")
    ] = "end_of_turn",
    layers: Annotated[
        str | None, typer.Option("--layers", help="Comma-separated (default: judge layers).")
    ] = None,
    text_field: Annotated[str, typer.Option("--text-field")] = "statement",
    system_field: Annotated[str | None, typer.Option("--system-field")] = None,
    user_field: Annotated[str, typer.Option("--user-field")] = "question",
    assistant_field: Annotated[str, typer.Option("--assistant-field")] = "response",
    name: Annotated[str, typer.Option("--name", help="Activation set name.")] = "",
    batch_size: Annotated[int, typer.Option("--batch-size")] = 8,
    limit: Annotated[int | None, typer.Option("--limit")] = None,
    wait: WaitOption = False,
    device: DeviceOption = "auto",
    max_attempts: MaxAttemptsOption = job_queue.DEFAULT_MAX_ATTEMPTS,
    *,
    ctx: typer.Context,
) -> None:
    """Capture residual activations of a benchmark's instances into an activation set."""
    submit_options(
        ctx,
        ExtractParams,
        format=fmt,
        layers=parse_option(ctx, ExtractParams, "layers", layers or ""),
    )


def open_when_reachable(
    settings: Settings, *, budget_s: float, log: Callable[[str], None]
) -> Store:
    """Open (and migrate) the store, retrying for ``budget_s`` while the database is away.

    A worker started during an outage (or cut off while it migrates) waits for the database as
    a running one does, instead of exiting.
    """
    from workers.runner import RETRY_MAX_S, is_transient

    deadline = time.monotonic() + budget_s
    pause = 0.5
    while True:
        try:
            return Store.open(settings)
        except DBAPIError as exc:
            if not is_transient(exc) or time.monotonic() + pause > deadline:
                raise
            log(f"worker: database unreachable at start-up, retrying: {str(exc.orig)[:120]}")
        time.sleep(pause)
        pause = min(2 * pause, RETRY_MAX_S)


def worker(
    device: Annotated[str, typer.Option("--device", help="auto, cpu or cuda:N.")] = "auto",
    once: Annotated[bool, typer.Option("--once", help="Exit when the queue is empty.")] = False,
    kinds: Annotated[
        str | None, typer.Option("--kinds", help="Comma-separated job kinds (default all).")
    ] = None,
    lease_seconds: Annotated[float, typer.Option("--lease-seconds")] = 60.0,
    poll_seconds: Annotated[float, typer.Option("--poll-seconds")] = 1.0,
) -> None:
    """Run queued jobs until SIGTERM/SIGINT (the current batch finishes, the job is requeued)."""
    from workers.runner import Worker, known_kinds

    try:
        handlers = known_kinds(_handlers(), kinds.split(",") if kinds else None)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--kinds") from None

    def log(line: str) -> None:
        typer.echo(line, err=True)

    store = open_when_reachable(Settings(), budget_s=max(lease_seconds, 60.0), log=log)
    runner = Worker(
        store,
        handlers,
        device=device,
        lease_seconds=lease_seconds,
        poll_seconds=poll_seconds,
        log=log,
    )
    _stop_on_signals(runner.shutdown)
    typer.echo(f"worker: kinds {sorted(handlers)}, device {device}", err=True)
    try:
        count = runner.run(once=once)
    finally:
        store.close()
    typer.echo(f"worker stopped after {count} job(s)", err=True)


@jobs_app.command("list")
def list_jobs(
    status: Annotated[str | None, typer.Option("--status")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """The newest jobs."""
    echo_rows(
        in_store(lambda s: [job_row(j) for j in job_queue.list_jobs(s, status=status)]),
        as_json,
        lambda r: f"{r['id']:>5} {r['kind']:<10} {r['status']:<10} {_progress(r['progress'])}",
    )


def _progress(progress: list[int | None]) -> str:
    done, total = progress
    return f"{done}/{total or '?'}"


@jobs_app.command("show")
def show(job_id: Annotated[int, typer.Argument()]) -> None:
    """One job as JSON."""
    typer.echo(json.dumps(in_store(lambda s: job_row(job_queue.get_job(s, job_id))), indent=2))


@jobs_app.command("cancel")
def cancel(job_id: Annotated[int, typer.Argument()]) -> None:
    """Cancel a queued or running job."""
    status = in_store(lambda s: job_queue.cancel(s, job_id).status)
    typer.echo(f"job {job_id}: {status}")


@jobs_app.command("retry")
def retry(job_id: Annotated[int, typer.Argument()]) -> None:
    """Queue a failed or cancelled job again."""
    status = in_store(lambda s: job_queue.retry(s, job_id).status)
    typer.echo(f"job {job_id}: {status}")
