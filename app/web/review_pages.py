"""Review queues in the browser and over REST: create, annotate by keyboard, adjudicate.

Annotators see a queue's items and, in blind mode, nothing of their labels, detector outputs
or other people's votes: the item view is built from the payload's text fields only, and the
409 page of a stale write says that the item changed without saying how.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import transaction
from app.errors import AppellateError, InvalidInput
from app.services import queue_sources, queues
from app.services.benchmarks import get_benchmark
from app.services.comments import MAX_COMMENT, add_comment, thread
from app.services.instances import other_fields, text_fields
from app.services.labels import label_names
from app.services.metrics_compare import compare_metrics
from app.services.queue_agreement import queue_agreement
from app.services.resolution import ADJUDICATION, VOTE, Resolution
from app.services.users import Principal
from app.store import Store
from app.tables import Benchmark, Comment, Instance, ReviewQueue, Role
from app.web.auth import Annotator, Reviewer
from app.web.deps import StoreDep
from app.web.templating import is_fragment_request, render
from app.web.urls import instance_url

router = APIRouter()
api_router = APIRouter(prefix="/api")
# Bootstrap resamples of the queue page's intervals: enough for two decimals, quick to draw.
REVIEW_RESAMPLES = 500


@dataclass(frozen=True)
class ItemView:
    """What the item page shows; ``resolution`` and ``fields`` are None/empty in blind mode."""

    instance_id: int
    external_id: str
    kind: str
    texts: list[tuple[str, str]]
    fields: list[tuple[str, str]]
    version: int
    own_vote: str | None
    n_votes: int
    resolution: Resolution | None
    comments: list[Comment]


def _sees_labels(queue: ReviewQueue, principal: Principal) -> bool:
    """Whether labels, votes and detector outputs may reach this user in this queue."""
    return principal.can(Role.reviewer) or not queue.blind


def item_view(
    session: Session, queue: ReviewQueue, instance_id: int, principal: Principal
) -> ItemView:
    """The item as ``principal`` may see it (see :func:`_sees_labels`)."""
    if not queues.in_queue(session, queue, instance_id):
        raise InvalidInput(f"instance {instance_id} is not in queue {queue.name!r}", field="item")
    inst = session.get(Instance, instance_id)
    assert inst is not None
    bench = session.get(Benchmark, inst.benchmark_id)
    assert bench is not None
    texts = text_fields(bench.kind, inst.payload)
    sees = _sees_labels(queue, principal)
    # Payload metadata can hold a reference label (e.g. JudgeBench's "label"): blind views
    # show the text fields only.
    fields = other_fields(bench.kind, inst.payload) if sees else []
    res = queues.resolutions(session, queue, [instance_id]).get(instance_id)
    comments = thread(session, instance_id)
    if not sees:
        # Another annotator's note may name a label; blind annotators read their own only.
        comments = [c for c in comments if c.author == principal.name]
    for c in comments:
        session.expunge(c)
    return ItemView(
        instance_id=instance_id,
        external_id=inst.external_id,
        kind=bench.kind,
        texts=texts,
        fields=fields,
        version=queues.label_version(session, instance_id, queue.label_name),
        own_vote=res.votes.get(principal.name) if res is not None else None,
        n_votes=len(res.votes) if res is not None else 0,
        resolution=res if sees else None,
        comments=comments,
    )


def _queue(session: Session, queue_id: int, principal: Principal) -> ReviewQueue:
    queue = queues.get_queue(session, queue_id)
    queues.check_may_work(session, queue, principal)
    return queue


def _names(raw: str) -> list[str]:
    """User names typed into a form, separated by spaces or commas."""
    return raw.replace(",", " ").split()


def _after_post(request: Request, url: str) -> Response:
    if is_fragment_request(request):
        return Response(status_code=204, headers={"HX-Redirect": url})
    return RedirectResponse(url, status_code=303)


# ----------------------------------------------------------------------------- pages


@router.get("/queues", response_class=HTMLResponse)
def queues_page(request: Request, store: StoreDep, principal: Annotator) -> HTMLResponse:
    """The queues this user may work in, with progress."""
    with transaction(store.factory) as session:
        rows = []
        for queue, bench_name, n_items in queues.list_queues(session):
            if not queues.may_work(session, queue, principal):
                continue
            prog = queues.progress(session, queue)
            mine = prog.votes_by_person.get(principal.name, 0)
            rows.append(
                {
                    "queue": queue,
                    "benchmark": bench_name,
                    "n": n_items,
                    "progress": prog,
                    "mine": mine,
                }
            )
            session.expunge(queue)
    return render(request, "queues.html", {"rows": rows})


@router.get("/benchmarks/{name}/queues/new", response_class=HTMLResponse)
def new_queue_form(
    request: Request,
    name: str,
    store: StoreDep,
    principal: Reviewer,
    source: str = "filter",
    query: str = "",
    label: str = "",
) -> HTMLResponse:
    """The form that builds a queue from a table filter or a disagreement list."""
    with transaction(store.factory) as session:
        bench = get_benchmark(session, name)
        labels = label_names(session, bench.id)
        session.expunge(bench)
    queue_sources.check_source(source)
    context = {
        "bench": bench,
        "source": source,
        "query": query,
        "labels": labels,
        "label": label or ("reference" if "reference" in labels else (labels or [""])[0]),
        "tags": queues.DEFECT_TAGS,
    }
    return render(request, "queue_new.html", context)


@router.post("/queues")
def create_queue(
    request: Request,
    store: StoreDep,
    principal: Reviewer,
    benchmark: Annotated[str, Form()],
    name: Annotated[str, Form(max_length=200)],
    label: Annotated[str, Form()],
    source: Annotated[str, Form()],
    query: Annotated[str, Form()] = "",
    overlap_k: Annotated[int, Form(ge=1, le=20)] = 2,
    blind: Annotated[bool, Form()] = False,
    instructions: Annotated[str, Form(max_length=4000)] = "",
    assignees: Annotated[str, Form()] = "",
) -> Response:
    """Freeze the source's items into a new queue and open it."""
    queue_id = _create(
        store,
        principal,
        benchmark,
        name,
        label,
        source,
        query,
        overlap_k,
        blind,
        instructions,
        assignees,
    )
    return _after_post(request, f"/queues/{queue_id}")


def _create(
    store: Store,
    principal: Principal,
    benchmark: str,
    name: str,
    label: str,
    source: str,
    query: str,
    overlap_k: int,
    blind: bool,
    instructions: str,
    assignees: str,
) -> int:
    with transaction(store.write_factory) as session:
        bench = get_benchmark(session, benchmark)
        ids = queue_sources.member_ids(session, bench, source, query)
        queue = queues.create_queue(
            session,
            bench,
            ids,
            name=name,
            label_name=label,
            source=source,
            query=query,
            overlap_k=overlap_k,
            blind=blind,
            instructions=instructions,
            created_by=principal.name,
            assignees=_names(assignees),
        )
        return queue.id


@router.get("/queues/{queue_id}", response_class=HTMLResponse)
def queue_page(
    request: Request, queue_id: int, store: StoreDep, principal: Annotator
) -> HTMLResponse:
    """A queue: settings, progress per person and, for reviewers, every item's state."""
    with transaction(store.factory) as session:
        queue = _queue(session, queue_id, principal)
        bench = session.get(Benchmark, queue.benchmark_id)
        assert bench is not None
        prog = queues.progress(session, queue)
        items: list[dict[str, Any]] = []
        if principal.can(Role.reviewer):
            states = queues.resolutions(session, queue)
            ids = queues.item_ids(session, queue)
            ext = dict(
                session.execute(
                    select(Instance.id, Instance.external_id).where(Instance.id.in_(ids))
                ).all()
            )
            for iid in ids:
                items.append({"id": iid, "external_id": ext[iid], "res": states.get(iid)})
        people = queues.assignees(session, queue)
        agreement = comparison = None
        comparison_note = ""
        if principal.can(Role.reviewer):
            agreement = queue_agreement(session, queue, resamples=REVIEW_RESAMPLES)
            try:
                comparison = compare_metrics(
                    session,
                    bench.name,
                    queue.label_name,
                    k=queue.overlap_k,
                    resamples=REVIEW_RESAMPLES,
                )
            except AppellateError as exc:
                # A label set that is not binary, or one no detector scores: say so.
                comparison_note = exc.message
        session.expunge(queue)
        session.expunge(bench)
    context = {
        "queue": queue,
        "bench": bench,
        "progress": prog,
        "items": items,
        "assignees": people,
        "agreement": agreement,
        "comparison": comparison,
        "comparison_note": comparison_note,
    }
    return render(request, "queue.html", context)


@router.post("/queues/{queue_id}/assignees")
def assign(
    request: Request,
    queue_id: int,
    store: StoreDep,
    principal: Reviewer,
    assignees: Annotated[str, Form()] = "",
) -> Response:
    """Replace who is assigned to the queue (empty: every annotator may work in it)."""
    with transaction(store.write_factory) as session:
        queue = queues.get_queue(session, queue_id)
        queues.set_assignees(session, queue, _names(assignees))
    return _after_post(request, f"/queues/{queue_id}")


@router.get("/queues/{queue_id}/next")
def next_item(request: Request, queue_id: int, store: StoreDep, principal: Annotator) -> Response:
    """Go to the next item this user has not voted on, or back to the queue when done."""
    with transaction(store.factory) as session:
        queue = _queue(session, queue_id, principal)
        iid = queues.next_item(session, queue, principal)
    if iid is None:
        return RedirectResponse(f"/queues/{queue_id}?done=1", status_code=303)
    return RedirectResponse(f"/queues/{queue_id}/items/{iid}", status_code=303)


def _render_item(
    request: Request,
    store: Store,
    queue_id: int,
    instance_id: int,
    principal: Principal,
    *,
    status_code: int = 200,
    stale: queues.StaleWrite | None = None,
    undone: bool = False,
) -> HTMLResponse:
    with transaction(store.factory) as session:
        queue = _queue(session, queue_id, principal)
        view = item_view(session, queue, instance_id, principal)
        prog = queues.progress(session, queue)
        session.expunge(queue)
    context = {
        "queue": queue,
        "item": view,
        "progress": prog,
        "tags": queues.DEFECT_TAGS,
        "stale": stale,
        "undone": undone,
        "reviewer": principal.can(Role.reviewer),
    }
    return render(request, "queue_item.html", context, status_code=status_code)


@router.get("/queues/{queue_id}/items/{instance_id}", response_class=HTMLResponse)
def item_page(
    request: Request,
    queue_id: int,
    instance_id: int,
    store: StoreDep,
    principal: Annotator,
    undone: bool = False,
) -> HTMLResponse:
    """One item: its text, the choices (keys 1-9), reason, defect tags and notes."""
    return _render_item(request, store, queue_id, instance_id, principal, undone=undone)


@dataclass(frozen=True)
class ReviewForm:
    """A vote or adjudication as posted: the value, the version seen, why and the tags."""

    value: str | None
    version: int
    reason: str
    tags: list[str]


async def review_form(
    value: Annotated[str, Form()],
    version: Annotated[int, Form(ge=0)],
    reason: Annotated[str, Form(max_length=queues.MAX_REASON)] = "",
    tags: Annotated[list[str] | None, Form()] = None,
) -> ReviewForm:
    """The posted fields; an empty value means none (a withdrawal, or "no label")."""
    return ReviewForm(value or None, version, reason, [t for t in (tags or []) if t])


ReviewFormDep = Annotated[ReviewForm, Depends(review_form)]


def _write(
    request: Request,
    store: Store,
    queue_id: int,
    instance_id: int,
    principal: Principal,
    kind: str,
    form: ReviewForm,
) -> Response:
    try:
        with transaction(store.write_factory) as session:
            queue = _queue(session, queue_id, principal)
            queues.record(
                session,
                queue,
                instance_id,
                principal,
                kind=kind,
                value=form.value,
                seen_version=form.version,
                reason=form.reason,
                tags=form.tags,
            )
    except queues.StaleWrite as stale:
        return _render_item(
            request, store, queue_id, instance_id, principal, status_code=409, stale=stale
        )
    # Annotators move on; a reviewer stays to see the decision in the item's state.
    target = (
        f"/queues/{queue_id}/next" if kind == VOTE else f"/queues/{queue_id}/items/{instance_id}"
    )
    return _after_post(request, target)


@router.post("/queues/{queue_id}/items/{instance_id}/vote")
def vote(
    request: Request,
    queue_id: int,
    instance_id: int,
    store: StoreDep,
    principal: Annotator,
    form: ReviewFormDep,
) -> Response:
    """Record a vote and go to the next item (409 with the current state if it is stale)."""
    return _write(request, store, queue_id, instance_id, principal, VOTE, form)


@router.post("/queues/{queue_id}/items/{instance_id}/adjudicate")
def adjudicate(
    request: Request,
    queue_id: int,
    instance_id: int,
    store: StoreDep,
    principal: Reviewer,
    form: ReviewFormDep,
) -> Response:
    """Decide the item's label (empty value: no label); 409 if it changed meanwhile."""
    return _write(request, store, queue_id, instance_id, principal, ADJUDICATION, form)


@router.post("/queues/{queue_id}/items/{instance_id}/skip")
def skip_item(
    request: Request, queue_id: int, instance_id: int, store: StoreDep, principal: Annotator
) -> Response:
    """Skip the item (it is not offered to this user again) and go to the next."""
    with transaction(store.write_factory) as session:
        queue = _queue(session, queue_id, principal)
        queues.skip(session, queue, instance_id, principal)
    return _after_post(request, f"/queues/{queue_id}/next")


@router.post("/queues/{queue_id}/undo")
def undo(request: Request, queue_id: int, store: StoreDep, principal: Annotator) -> Response:
    """Withdraw this user's last vote in the queue and reopen that item."""
    with transaction(store.write_factory) as session:
        queue = _queue(session, queue_id, principal)
        iid = queues.undo_last_vote(session, queue, principal)
    if iid is None:
        return _after_post(request, f"/queues/{queue_id}/next")
    return _after_post(request, f"/queues/{queue_id}/items/{iid}?undone=1")


@router.post("/queues/{queue_id}/items/{instance_id}/comments")
def add_queue_comment(
    request: Request,
    queue_id: int,
    instance_id: int,
    store: StoreDep,
    principal: Annotator,
    body: Annotated[str, Form(max_length=MAX_COMMENT)],
) -> Response:
    """Add a note to the thread of an item of a queue this user works in."""
    with transaction(store.write_factory) as session:
        queue = _queue(session, queue_id, principal)
        if not queues.in_queue(session, queue, instance_id):
            raise InvalidInput(f"instance {instance_id} is not in this queue", field="item")
        add_comment(session, instance_id, principal.name, body)
    return _after_post(request, f"/queues/{queue_id}/items/{instance_id}")


@router.post("/instances/{instance_id}/comments")
def add_instance_comment(
    request: Request,
    instance_id: int,
    store: StoreDep,
    principal: Reviewer,
    body: Annotated[str, Form(max_length=MAX_COMMENT)],
) -> Response:
    """Add a note to any instance's thread (from its dashboard page)."""
    with transaction(store.write_factory) as session:
        add_comment(session, instance_id, principal.name, body)
        inst = session.get(Instance, instance_id)
        assert inst is not None
        bench = session.get(Benchmark, inst.benchmark_id)
        assert bench is not None
        target = instance_url(bench.name, inst.external_id) + "#comments"
    return _after_post(request, target)


# ----------------------------------------------------------------------------- REST


class ReviewWrite(BaseModel):
    """A vote or adjudication over REST: the item, the value and the version it saw."""

    instance_id: int
    value: str | None
    version: int = Field(ge=0)
    reason: str = Field(default="", max_length=queues.MAX_REASON)
    tags: list[str] = Field(default_factory=list)


def _api_write(
    store: Store, queue_id: int, body: ReviewWrite, principal: Principal, kind: str
) -> Any:
    try:
        with transaction(store.write_factory) as session:
            queue = _queue(session, queue_id, principal)
            event = queues.record(
                session,
                queue,
                body.instance_id,
                principal,
                kind=kind,
                value=body.value,
                seen_version=body.version,
                reason=body.reason,
                tags=body.tags,
            )
            return {"event_id": event.id, "version": event.id}
    except queues.StaleWrite as stale:
        # The loser gets the item's current state (as much of it as they may see) to decide
        # again against the new version.
        current = _item_state(store, queue_id, body.instance_id, principal)
        return JSONResponse({"detail": stale.message, **current}, status_code=409)


def _item_state(
    store: Store, queue_id: int, instance_id: int, principal: Principal
) -> dict[str, Any]:
    with transaction(store.factory) as session:
        queue = _queue(session, queue_id, principal)
        view = item_view(session, queue, instance_id, principal)
    out: dict[str, Any] = {
        "instance_id": instance_id,
        "version": view.version,
        "own_vote": view.own_vote,
        "n_votes": view.n_votes,
    }
    if view.resolution is not None:
        res = view.resolution
        out.update(
            original=res.original,
            resolved=res.resolved,
            rule=res.rule,
            votes=res.votes,
            adjudication=res.adjudication.value if res.adjudication else None,
        )
    return out


@api_router.get("/queues/{queue_id}")
def api_queue(queue_id: int, store: StoreDep, principal: Annotator) -> dict[str, Any]:
    """A queue's settings and progress."""
    with transaction(store.factory) as session:
        queue = _queue(session, queue_id, principal)
        prog = queues.progress(session, queue)
        summary = {**queues.queue_summary(queue), "progress": asdict(prog)}
    if not _sees_labels(queue, principal):
        # How items were decided says something about their labels; blind annotators see
        # only how many are done.
        for key in ("adjudicated", "unanimous"):
            del summary["progress"][key]
    return summary


@api_router.get("/queues/{queue_id}/items/{instance_id}")
def api_item(
    queue_id: int, instance_id: int, store: StoreDep, principal: Annotator
) -> dict[str, Any]:
    """The item's version and this user's vote; labels and votes only outside blind mode."""
    return _item_state(store, queue_id, instance_id, principal)


@api_router.post("/queues/{queue_id}/votes", status_code=201)
def api_vote(
    queue_id: int, body: ReviewWrite, store: StoreDep, principal: Annotator
) -> dict[str, Any]:
    """Vote on an item (409 if its label changed after ``version``)."""
    return _api_write(store, queue_id, body, principal, VOTE)


@api_router.post("/queues/{queue_id}/adjudications", status_code=201)
def api_adjudicate(
    queue_id: int, body: ReviewWrite, store: StoreDep, principal: Reviewer
) -> dict[str, Any]:
    """Adjudicate an item (409 if its label changed after ``version``)."""
    return _api_write(store, queue_id, body, principal, ADJUDICATION)
