"""Review queues in the browser and over REST: create, annotate by keyboard, adjudicate.

What each person may see (blind mode) is decided in :mod:`app.services.review.review_views`; these
routes parse the request, call it or a queue operation, and render. The 409 page of a stale
write says that the item changed without saying how.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, Field

from app.db import transaction
from app.errors import InvalidInput, NotFound
from app.services.accounts.users import Principal
from app.services.evidence.benchmarks import get_benchmark
from app.services.evidence.comments import MAX_COMMENT
from app.services.evidence.resolution import ADJUDICATION, VOTE
from app.services.metrics.rankers import RANKERS
from app.services.review import active_review, queues, review_views
from app.services.review.queue_sources import DEFAULT_SIZE, MAX_SIZE
from app.services.review.review_actions import (
    NewQueue,
    comment_on_instance,
    comment_on_item,
    create_queue_from_source,
    reveal_item,
)
from app.services.review.review_views import ItemState, QueueSummary
from app.store import Store
from app.tables import Benchmark, Instance, Role
from app.web.auth import Annotator, RequireReviewer, Reviewer
from app.web.deps import ReadCache, StoreDep
from app.web.error_docs import BAD_BODY, invalid
from app.web.job_forms import FormData
from app.web.pages import instance_response
from app.web.params import DbCount, DbId, Page
from app.web.responses import redirect_after_post
from app.web.routers import json_router, page_router
from app.web.templating import render
from app.web.urls import instance_url

router = page_router()
api_router = json_router("review")


def _names(raw: str) -> list[str]:
    """User names typed into a form, separated by spaces or commas."""
    return raw.replace(",", " ").split()


# ----------------------------------------------------------------------------- pages


@router.get("/queues", response_class=HTMLResponse)
def queues_page(request: Request, store: StoreDep, principal: Annotator) -> HTMLResponse:
    """The queues this user may work in, with progress."""
    with transaction(store.factory) as session:
        rows = review_views.visible_queues(session, principal)
    return render(request, "queues.html", {"rows": rows})


@router.get("/queues/new", response_class=HTMLResponse, dependencies=[RequireReviewer])
def choose_queue_benchmark(
    request: Request, store: StoreDep, benchmark: str = "", label: str = ""
) -> Response:
    """The "New queue" entry of the list of queues: pick a benchmark, then its new-queue form."""
    if benchmark:
        return new_queue_form(request, benchmark, store, label=label)
    with transaction(store.factory) as session:
        names = review_views.queue_benchmarks(session)
    if len(names) == 1:
        return RedirectResponse(f"/queues/new?benchmark={quote(names[0])}", status_code=303)
    return render(request, "queue_new.html", {"bench": None, "benchmarks": names})


@router.get(
    "/benchmarks/{name}/queues/new", response_class=HTMLResponse, dependencies=[RequireReviewer]
)
def new_queue_form(
    request: Request,
    name: str,
    store: StoreDep,
    source: str = "filter",
    query: str = "",
    label: str = "",
) -> HTMLResponse:
    """The form that builds a queue from a table filter or a disagreement list.

    The preview of how many items the source lists is computed here for the query the page
    was opened with, and again (:func:`queue_preview`) as the form's fields change.
    """
    with transaction(store.factory) as session:
        form = review_views.queue_form(session, name, source, label, query)
    context = {**vars(form), "query": query, "max_size": MAX_SIZE}
    return render(request, "queue_new.html", context)


@router.get(
    "/benchmarks/{name}/queues/preview",
    response_class=HTMLResponse,
    dependencies=[RequireReviewer],
)
def queue_preview(
    request: Request,
    name: str,
    store: StoreDep,
    source: str = "filter",
    query: str = "",
    size: str = "",
) -> HTMLResponse:
    """How many items the new-queue form's source lists, and how many the queue takes.

    The form's htmx target, as a fragment; a page of its own without JavaScript. A size that
    is not a whole number is the preview's message, not a 422: it is shown while typed.
    """
    with transaction(store.factory) as session:
        bench = get_benchmark(session, name)
        try:
            preview = review_views.queue_preview(session, bench, source, query, int(size))
        except ValueError:
            message = f"the size must be a whole number, not {size!r}"
            preview = review_views.QueuePreview(0, error=message)
    context = {"bench": bench, "preview": preview}
    return render(request, "queue_preview.html", context, fragment="_queue_preview.html")


def _tag_lines(raw: str) -> list[str] | None:
    """Tags typed one per line (None when none is: the benchmark kind's defaults)."""
    lines = [line.strip() for line in raw.splitlines() if line.strip()]
    return lines or None


async def new_queue(
    benchmark: Annotated[str, Form()],
    name: Annotated[str, Form(max_length=200)],
    label: Annotated[str, Form()],
    source: Annotated[str, Form()],
    query: Annotated[str, Form()] = "",
    overlap_k: Annotated[int, Form(ge=1, le=20)] = 2,
    blind: Annotated[bool, Form()] = False,
    instructions: Annotated[str, Form(max_length=4000)] = "",
    assignees: Annotated[str, Form()] = "",
    size: Annotated[int, Form(ge=1, le=MAX_SIZE)] = DEFAULT_SIZE,
    tags: Annotated[str, Form(max_length=4000)] = "",
) -> NewQueue:
    """The new-queue form's fields; ``tags`` one per line (empty: the kind's defaults)."""
    return NewQueue(
        benchmark, name, label, source, query, overlap_k, blind, instructions, _names(assignees),
        size, _tag_lines(tags),
    )  # fmt: skip


@router.post("/queues")
def create_queue(
    request: Request,
    store: StoreDep,
    principal: Reviewer,
    new: Annotated[NewQueue, Depends(new_queue)],
) -> Response:
    """Freeze the source's items into a new queue and open it."""
    with transaction(store.write_factory) as session:
        queue_id = create_queue_from_source(session, new, principal.name).id
    return redirect_after_post(request, f"/queues/{queue_id}")


@router.get("/queues/{queue_id}", response_class=HTMLResponse)
def queue_page(
    request: Request, queue_id: DbId, store: StoreDep, principal: Annotator, page: Page = 1
) -> HTMLResponse:
    """A queue: settings, progress per person and, for reviewers, the items' states by page."""
    with transaction(store.factory) as session:
        shown = review_views.queue_page(session, queue_id, principal, page)
        active = (
            active_review.active_review(session, shown.queue)
            if principal.can(Role.reviewer)
            else None
        )
    # The template names the page's fields (queue, bench, progress, items, page, ...).
    context = {
        **vars(shown),
        "active": active,
        "rankers": list(RANKERS),
        "items_per_page": review_views.ITEMS_PER_PAGE,
    }
    return render(request, "queue.html", context)


@router.post("/queues/{queue_id}/ranking", dependencies=[RequireReviewer])
def set_ranking(
    request: Request,
    queue_id: DbId,
    store: StoreDep,
    ranker: Annotated[str, Form()] = "",
    rerank_every: Annotated[DbCount, Form()] = 0,
) -> Response:
    """Order the queue by a ranker (re-ranked after every N reviewed items), or by its source."""
    with transaction(store.write_factory) as session:
        queue = queues.get_queue(session, queue_id)
        active_review.set_ranking(session, queue, ranker, rerank_every)
        if queue.ranker:
            active_review.enqueue_if_due(session, queue, force=True)
    return redirect_after_post(request, f"/queues/{queue_id}")


@router.post("/queues/{queue_id}/rerank", dependencies=[RequireReviewer])
def rerank_now(request: Request, queue_id: DbId, store: StoreDep) -> Response:
    """Queue a re-ranking of the queue's unreviewed items now."""
    with transaction(store.write_factory) as session:
        queue = queues.get_queue(session, queue_id)
        if not queue.ranker:
            raise InvalidInput(f"queue {queue.name!r} is not ordered by a ranker", field="ranker")
        active_review.enqueue_if_due(session, queue, force=True)
    return redirect_after_post(request, f"/queues/{queue_id}")


@router.get("/queues/{queue_id}/agreement", response_class=HTMLResponse)
def queue_agreement_page(
    request: Request, queue_id: DbId, store: StoreDep, principal: Reviewer
) -> HTMLResponse:
    """Inter-annotator agreement of the queue's votes: the section the queue page loads on request.

    A page of its own without JavaScript; htmx swaps the section into the queue page.
    """
    with transaction(store.factory) as session:
        section = review_views.queue_agreement_section(session, queue_id, principal)
    return render(request, "queue_agreement.html", vars(section), fragment="_queue_agreement.html")


@router.get("/queues/{queue_id}/comparison", response_class=HTMLResponse)
def queue_comparison(
    request: Request, queue_id: DbId, store: StoreDep, cache: ReadCache, principal: Reviewer
) -> HTMLResponse:
    """Metrics on the original vs the resolved labels: the section the queue page loads.

    A page of its own without JavaScript; htmx swaps the section into the queue page.
    """
    with transaction(store.factory) as session:
        section = review_views.queue_comparison(
            session,
            queue_id,
            principal,
            limit=store.settings.metrics_inline_items,
            facets_cache=cache,
        )
    return render(
        request, "queue_comparison.html", vars(section), fragment="_queue_comparison.html"
    )


@router.post("/queues/{queue_id}/assignees", dependencies=[RequireReviewer])
def assign(
    request: Request,
    queue_id: DbId,
    store: StoreDep,
    assignees: Annotated[str, Form()] = "",
) -> Response:
    """Replace who is assigned to the queue (empty: every annotator may work in it)."""
    with transaction(store.write_factory) as session:
        queues.set_assignees(session, queues.get_queue(session, queue_id), _names(assignees))
    return redirect_after_post(request, f"/queues/{queue_id}")


@router.get("/queues/{queue_id}/next")
def next_item(queue_id: DbId, store: StoreDep, principal: Annotator) -> Response:
    """Go to the next item this user has not voted on, or back to the queue when done."""
    with transaction(store.factory) as session:
        queue = queues.get_queue_for(session, queue_id, principal)
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
        page = review_views.item_page(session, queue_id, instance_id, principal)
    context = {
        **vars(page),
        "stale": stale,
        "undone": undone,
        "reviewer": principal.can(Role.reviewer),
    }
    return render(request, "queue_item.html", context, status_code=status_code)


@router.get("/queues/{queue_id}/items/{instance_id}", response_class=HTMLResponse)
def item_page(
    request: Request,
    queue_id: DbId,
    instance_id: DbId,
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
    version: Annotated[DbCount, Form()],
    value: Annotated[str, Form()] = "",
    typed: Annotated[str, Form(max_length=queues.MAX_LABEL_LENGTH)] = "",
    reason: Annotated[str, Form(max_length=queues.MAX_REASON)] = "",
    tags: Annotated[list[str] | None, Form()] = None,
) -> ReviewForm:
    """The posted fields; an empty value means none (a withdrawal, or "no label").

    A clicked choice is the value; without one, a typed answer (answer queues) is.
    """
    chosen = value or typed.strip()
    return ReviewForm(chosen or None, version, reason, [t for t in (tags or []) if t])


ReviewFormDep = Annotated[ReviewForm, Depends(review_form)]


def _record(
    store: Store,
    queue_id: int,
    instance_id: int,
    principal: Principal,
    kind: str,
    form: ReviewForm | ReviewWrite,
) -> int:
    """Append the vote or adjudication; the new event's id (also the item's new version)."""
    with transaction(store.write_factory) as session:
        queue = queues.get_queue_for(session, queue_id, principal)
        event = queues.record(
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
        # An active queue re-ranks after every N reviewed items (a job; the write stays short).
        active_review.enqueue_if_due(session, queue)
        return event.id


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
        _record(store, queue_id, instance_id, principal, kind, form)
    except queues.StaleWrite as stale:
        return _render_item(
            request, store, queue_id, instance_id, principal, status_code=409, stale=stale
        )
    # Annotators move on; a reviewer stays to see the decision in the item's state.
    target = (
        f"/queues/{queue_id}/next" if kind == VOTE else f"/queues/{queue_id}/items/{instance_id}"
    )
    return redirect_after_post(request, target)


@router.post("/queues/{queue_id}/items/{instance_id}/vote")
def vote(
    request: Request,
    queue_id: DbId,
    instance_id: DbId,
    store: StoreDep,
    principal: Annotator,
    form: ReviewFormDep,
) -> Response:
    """Record a vote and go to the next item (409 with the current state if it is stale)."""
    return _write(request, store, queue_id, instance_id, principal, VOTE, form)


@router.post("/queues/{queue_id}/items/{instance_id}/adjudicate")
def adjudicate(
    request: Request,
    queue_id: DbId,
    instance_id: DbId,
    store: StoreDep,
    principal: Reviewer,
    form: ReviewFormDep,
) -> Response:
    """Decide the item's label (empty value: no label); 409 if it changed meanwhile."""
    return _write(request, store, queue_id, instance_id, principal, ADJUDICATION, form)


@router.post("/queues/{queue_id}/items/{instance_id}/reveal")
def reveal(
    request: Request, queue_id: DbId, instance_id: DbId, store: StoreDep, principal: Reviewer
) -> Response:
    """Show a blind item's labels and votes to this reviewer, logged as a note on the item."""
    with transaction(store.write_factory) as session:
        queue = queues.get_queue_for(session, queue_id, principal)
        reveal_item(session, queue, instance_id, principal)
    return redirect_after_post(request, f"/queues/{queue_id}/items/{instance_id}#labels")


@router.post("/queues/{queue_id}/items/{instance_id}/skip")
def skip_item(
    request: Request, queue_id: DbId, instance_id: DbId, store: StoreDep, principal: Annotator
) -> Response:
    """Skip the item (it is not offered to this user again) and go to the next."""
    with transaction(store.write_factory) as session:
        queue = queues.get_queue_for(session, queue_id, principal)
        queues.skip(session, queue, instance_id, principal)
    return redirect_after_post(request, f"/queues/{queue_id}/next")


@router.post("/queues/{queue_id}/undo")
def undo(request: Request, queue_id: DbId, store: StoreDep, principal: Annotator) -> Response:
    """Withdraw this user's last vote in the queue and reopen that item."""
    with transaction(store.write_factory) as session:
        queue = queues.get_queue_for(session, queue_id, principal)
        iid = queues.undo_last_vote(session, queue, principal)
    if iid is None:
        return redirect_after_post(request, f"/queues/{queue_id}/next")
    return redirect_after_post(request, f"/queues/{queue_id}/items/{iid}?undone=1")


@router.post("/queues/{queue_id}/items/{instance_id}/comments")
def add_queue_comment(
    request: Request,
    queue_id: DbId,
    instance_id: DbId,
    store: StoreDep,
    principal: Annotator,
    body: Annotated[str, Form(max_length=MAX_COMMENT)],
) -> Response:
    """Add a note to the thread of an item of a queue this user works in."""
    with transaction(store.write_factory) as session:
        queue = queues.get_queue_for(session, queue_id, principal)
        comment_on_item(session, queue, instance_id, principal, body)
    return redirect_after_post(request, f"/queues/{queue_id}/items/{instance_id}")


@router.post("/instances/{instance_id}/comments")
def add_instance_comment(
    request: Request,
    instance_id: DbId,
    store: StoreDep,
    principal: Reviewer,
    body: Annotated[str, Form(max_length=MAX_COMMENT)],
) -> Response:
    """Add a note to any instance's thread (from its dashboard page)."""
    with transaction(store.write_factory) as session:
        bench_name, external_id = comment_on_instance(session, instance_id, principal, body)
    return redirect_after_post(request, instance_url(bench_name, external_id) + "#comments")


@router.post("/instances/{instance_id}/relabel")
def relabel_instance(
    request: Request,
    instance_id: DbId,
    store: StoreDep,
    cache: ReadCache,
    principal: Reviewer,
    form: FormData,
) -> Response:
    """Fix one label from the instance page: an adjudication without a queue (append-only).

    A refusal (a value outside the set's choices, no reason) is shown beside the form with a
    422; a label changed since the page was loaded, with a 409.
    """
    with transaction(store.factory) as session:
        inst = session.get(Instance, instance_id)
        if inst is None:
            raise NotFound(f"no instance {instance_id}")
        bench_name = session.get_one(Benchmark, inst.benchmark_id).name
        external_id = inst.external_id
    try:
        if not form.get("version", "").isdigit():
            raise InvalidInput("the page's label version is missing: reload it", field="version")
        version = int(form["version"])
        with transaction(store.write_factory) as session:
            queues.relabel(
                session, instance_id, form.get("label", ""), principal,
                value=form.get("value", ""), seen_version=version, reason=form.get("reason", ""),
            )  # fmt: skip
    except InvalidInput as exc:
        return instance_response(
            request, store, cache, bench_name, external_id,
            relabel_error=exc.message, status_code=422,
        )  # fmt: skip
    except queues.StaleWrite as stale:
        return instance_response(
            request, store, cache, bench_name, external_id,
            relabel_error=stale.message,
            status_code=409,
        )  # fmt: skip
    return redirect_after_post(request, instance_url(bench_name, external_id) + "#labels")


# ----------------------------------------------------------------------------- REST


class ReviewWrite(BaseModel):
    """A vote or adjudication over REST: the item, the value and the version it saw."""

    instance_id: DbId
    value: str | None
    version: DbCount
    reason: str = Field(default="", max_length=queues.MAX_REASON)
    tags: list[str] = Field(default_factory=list)


class Written(BaseModel):
    """The appended label event; its id is the item's new version."""

    event_id: int
    version: int


class StaleState(ItemState):
    """A refused write (409): why, and the item's current state as far as the caller may see."""

    detail: str


def _item_state(store: Store, queue_id: int, instance_id: int, principal: Principal) -> ItemState:
    with transaction(store.factory) as session:
        queue = queues.get_queue_for(session, queue_id, principal)
        return review_views.item_state(session, queue, instance_id, principal)


def _api_write(
    store: Store, queue_id: int, body: ReviewWrite, principal: Principal, kind: str
) -> Written | JSONResponse:
    try:
        event_id = _record(store, queue_id, body.instance_id, principal, kind, body)
    except queues.StaleWrite as stale:
        # The loser gets the item's current state (as much of it as they may see) to decide
        # again against the new version.
        current = _item_state(store, queue_id, body.instance_id, principal)
        content = {"detail": stale.message, **current.model_dump(exclude_unset=True)}
        return JSONResponse(content, status_code=409)
    return Written(event_id=event_id, version=event_id)


# The queue and item bodies leave out the fields blind mode hides (unset, see review_views).
@api_router.get(
    "/queues/{queue_id}", response_model=QueueSummary, response_model_exclude_unset=True
)
def api_queue(queue_id: DbId, store: StoreDep, principal: Annotator) -> QueueSummary:
    """A queue's settings and progress."""
    with transaction(store.factory) as session:
        queue = queues.get_queue_for(session, queue_id, principal)
        return review_views.queue_summary(session, queue, principal)


@api_router.get(
    "/queues/{queue_id}/items/{instance_id}",
    response_model=ItemState,
    response_model_exclude_unset=True,
)
def api_item(queue_id: DbId, instance_id: DbId, store: StoreDep, principal: Annotator) -> ItemState:
    """The item's version and this user's vote; labels and votes only outside blind mode."""
    return _item_state(store, queue_id, instance_id, principal)


@api_router.post(
    "/queues/{queue_id}/items/{instance_id}/reveal",
    response_model=ItemState,
    responses=invalid("an item not in the queue (`item`)"),
    response_model_exclude_unset=True,
)
def api_reveal(
    queue_id: DbId, instance_id: DbId, store: StoreDep, principal: Reviewer
) -> ItemState:
    """Reveal a blind item's labels and votes to this reviewer (logged); its full state."""
    with transaction(store.write_factory) as session:
        queue = queues.get_queue_for(session, queue_id, principal)
        reveal_item(session, queue, instance_id, principal)
    return _item_state(store, queue_id, instance_id, principal)


# Both writes answer 201 with the new event, or 409 with the item's current state.
_WRITE_ROUTE: dict[str, Any] = {
    "status_code": 201,
    "response_model": Written,
    "responses": {
        409: {"model": StaleState, "description": "The item changed meanwhile."},
        **invalid(
            "an item not in the queue (`item`)",
            "a value outside the queue's label set",
        ),
        **BAD_BODY,
    },
}


@api_router.post("/queues/{queue_id}/votes", **_WRITE_ROUTE)
def api_vote(
    queue_id: DbId, body: ReviewWrite, store: StoreDep, principal: Annotator
) -> Written | JSONResponse:
    """Vote on an item (409 if its label changed after ``version``)."""
    return _api_write(store, queue_id, body, principal, VOTE)


@api_router.post("/queues/{queue_id}/adjudications", **_WRITE_ROUTE)
def api_adjudicate(
    queue_id: DbId, body: ReviewWrite, store: StoreDep, principal: Reviewer
) -> Written | JSONResponse:
    """Adjudicate an item (409 if its label changed after ``version``)."""
    return _api_write(store, queue_id, body, principal, ADJUDICATION)
