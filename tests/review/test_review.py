"""Review queues over HTTP: votes, undo, skip, adjudication, roles, CSRF, blind mode, races."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.main import create_app
from app.services.evidence.labels import current_labels
from app.settings import Settings
from app.store import Store
from app.tables import Instance, LabelEvent, ReviewQueue
from tests.support import factories as f
from tests.support.auth_support import bearer, browser_session
from tests.support.live_server import live_server


@pytest.fixture
def store(settings: Settings, factory: sessionmaker[Session]) -> Iterator[Store]:
    f.seed_benchmarks(factory)  # ``factory`` empties the database after the test
    s = Store.open(settings)
    yield s
    s.close()


_OPEN = ExitStack()


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    _OPEN.close()


def _login(settings: Settings, name: str, role: str) -> tuple[TestClient, str]:
    """A client signed in as ``name`` through a browser session, and its CSRF token."""
    client = _OPEN.enter_context(TestClient(create_app(settings)))
    return client, browser_session(client, settings, name, role)


def _make_queue(client: TestClient, csrf: str, **fields: Any) -> int:
    data = {
        "csrf_token": csrf,
        "benchmark": f.PAIRWISE,
        "name": "all pairs",
        "label": "reference",
        "source": "filter",
        "query": "",
        "overlap_k": "2",
        "blind": "true",
        **fields,
    }
    r = client.post("/queues", data=data, follow_redirects=False)
    assert r.status_code == 303, r.text
    return int(r.headers["location"].rsplit("/", 1)[1])


def _item_form(client: TestClient, url: str) -> tuple[int, int]:
    """(instance id, version) of the item page ``url`` leads to."""
    page = client.get(url)
    assert page.status_code == 200, page.text
    iid = int(str(page.url).rsplit("/", 1)[1].split("?")[0])
    version = re.search(r'name="version" value="(\d+)"', page.text)
    assert version is not None
    return iid, int(version.group(1))


def test_annotators_vote_undo_skip_and_progress(store: Store, settings: Settings) -> None:
    reviewer, rcsrf = _login(settings, "rita", "reviewer")
    qid = _make_queue(reviewer, rcsrf)
    ann, acsrf = _login(settings, "ann", "annotator")
    iid, version = _item_form(ann, f"/queues/{qid}/next")
    r = ann.post(
        f"/queues/{qid}/items/{iid}/vote",
        data={
            "csrf_token": acsrf,
            "value": "B",
            "version": version,
            "reason": "typo",
            "tags": ["wrong reference", "ambiguous"],
        },
        follow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"] == f"/queues/{qid}/next"
    # The next item is another one; undo brings the first back and withdraws the vote.
    nxt, _ = _item_form(ann, f"/queues/{qid}/next")
    assert nxt != iid
    undo = ann.post(f"/queues/{qid}/undo", data={"csrf_token": acsrf}, follow_redirects=False)
    assert undo.headers["location"] == f"/queues/{qid}/items/{iid}?undone=1"
    again, _ = _item_form(ann, f"/queues/{qid}/next")
    assert again == iid
    skip = ann.post(f"/queues/{qid}/items/{iid}/skip", data={"csrf_token": acsrf})
    assert skip.status_code == 200
    assert _item_form(ann, f"/queues/{qid}/next")[0] not in (iid,)
    with transaction(store.factory) as s:
        ext = s.scalar(select(Instance.external_id).where(Instance.id == iid))
        events = list(
            s.scalars(
                select(LabelEvent)
                .where(LabelEvent.instance_id == iid, LabelEvent.source == "vote")
                .order_by(LabelEvent.id)
            )
        )
        # History is kept: the vote and its withdrawal, tags and reason as given.
        assert [(e.value, e.author) for e in events] == [("B", "ann"), (None, "ann")]
        assert events[0].tags == ["wrong reference", "ambiguous"] and events[0].reason == "typo"
        # Votes never move the original label the dashboard reads.
        original = next(p.reference[-1] for p in f.PAIRS if p.external_id == ext)
        assert current_labels(s, [iid], ["reference"])[iid]["reference"] == original
    api = ann.get(f"/api/queues/{qid}").json()
    assert api["progress"]["total"] == len(f.PAIRS)
    assert api["progress"]["skips_by_person"] == {"ann": 1}


def test_k_unanimous_votes_resolve_and_adjudication_overrides(
    store: Store, settings: Settings
) -> None:
    reviewer, rcsrf = _login(settings, "rita", "reviewer")
    qid = _make_queue(reviewer, rcsrf, overlap_k="2")
    # Ann votes on her next item; bob, sent elsewhere (the item with fewer votes), opens
    # hers and agrees.
    ann, acsrf = _login(settings, "ann", "annotator")
    iid, _ = _item_form(ann, f"/queues/{qid}/next")
    bob, bcsrf = _login(settings, "bob", "annotator")
    assert _item_form(bob, f"/queues/{qid}/next")[0] != iid
    for client, csrf in ((ann, acsrf), (bob, bcsrf)):
        _, version = _item_form(client, f"/queues/{qid}/items/{iid}")
        r = client.post(
            f"/queues/{qid}/items/{iid}/vote",
            data={"csrf_token": csrf, "value": "B", "version": version},
            follow_redirects=False,
        )
        assert r.status_code == 303
    with transaction(store.factory) as s:
        ext = s.scalar(select(Instance.external_id).where(Instance.id == iid))
    # Blind for the reviewer too, until a logged reveal.
    state = reviewer.get(f"/api/queues/{qid}/items/{iid}").json()
    assert "votes" not in state and "original" not in state
    state = reviewer.post(
        f"/api/queues/{qid}/items/{iid}/reveal", headers={"X-CSRF-Token": rcsrf}
    ).json()
    assert state["votes"] == {"ann": "B", "bob": "B"}
    assert state["resolved"] == "B" and state["rule"] == "unanimous-votes"
    r = reviewer.post(
        f"/queues/{qid}/items/{iid}/adjudicate",
        data={"csrf_token": rcsrf, "value": "A", "version": state["version"], "reason": "checked"},
        follow_redirects=False,
    )
    assert r.status_code == 303
    state = reviewer.get(f"/api/queues/{qid}/items/{iid}").json()
    assert state["resolved"] == "A" and state["rule"] == "adjudication"
    # The queue page links its agreement section (computed on request), and its comparison
    # shows what the adjudication does to the metrics.
    page = reviewer.get(f"/queues/{qid}").text
    assert 'id="agreement-link"' in page and 'id="alpha"' not in page
    agreement = reviewer.get(f"/queues/{qid}/agreement").text
    assert 'id="alpha"' in agreement and "ann · bob" in agreement
    comparison = reviewer.get(f"/queues/{qid}/comparison").text
    original = next(p.reference[-1] for p in f.PAIRS if p.external_id == ext)
    changed = 0 if original == "A" else 1
    assert f"{changed} item{'' if changed == 1 else 's'} of {f.PAIRWISE} change label" in comparison


def test_assignment_limits_who_may_work(store: Store, settings: Settings) -> None:
    reviewer, rcsrf = _login(settings, "rita", "reviewer")
    ann, _ = _login(settings, "ann", "annotator")
    bob, _ = _login(settings, "bob", "annotator")
    qid = _make_queue(reviewer, rcsrf, assignees="ann")
    assert ann.get(f"/queues/{qid}/next").status_code == 200
    assert bob.get(f"/queues/{qid}/next").status_code == 403
    assert f'data-queue="{qid}"' not in bob.get("/queues").text
    bad = reviewer.post(f"/queues/{qid}/assignees", data={"csrf_token": rcsrf, "assignees": "zed"})
    assert bad.status_code == 422 and "no user named zed" in bad.text
    reviewer.post(f"/queues/{qid}/assignees", data={"csrf_token": rcsrf, "assignees": "ann, bob"})
    assert bob.get(f"/queues/{qid}/next").status_code == 200


def test_a_stale_vote_gets_409_with_the_current_state(store: Store, settings: Settings) -> None:
    reviewer, rcsrf = _login(settings, "rita", "reviewer")
    qid = _make_queue(reviewer, rcsrf, blind="false")
    ann, acsrf = _login(settings, "ann", "annotator")
    bob, bcsrf = _login(settings, "bob", "annotator")
    iid, version = _item_form(ann, f"/queues/{qid}/next")
    assert _item_form(bob, f"/queues/{qid}/items/{iid}") == (iid, version)
    first = ann.post(
        f"/queues/{qid}/items/{iid}/vote",
        data={"csrf_token": acsrf, "value": "A", "version": version},
        follow_redirects=False,
    )
    assert first.status_code == 303
    late = bob.post(
        f"/queues/{qid}/items/{iid}/vote",
        data={"csrf_token": bcsrf, "value": "B", "version": version},
    )
    assert late.status_code == 409
    assert 'id="stale"' in late.text and "ann: A" in late.text  # open queue: votes visible
    fresh = re.search(r'name="version" value="(\d+)"', late.text)
    assert fresh is not None and int(fresh.group(1)) > version
    retry = bob.post(
        f"/queues/{qid}/items/{iid}/vote",
        data={"csrf_token": bcsrf, "value": "B", "version": fresh.group(1)},
        follow_redirects=False,
    )
    assert retry.status_code == 303


# The least role each mutating route needs; routes not named here need reviewer.
ANNOTATOR_ROUTES = {
    "/logout",
    "/account/password",
    "/account/tokens",
    "/account/tokens/{token_id}/revoke",
    "/queues/{queue_id}/items/{instance_id}/vote",
    "/queues/{queue_id}/items/{instance_id}/skip",
    "/queues/{queue_id}/undo",
    "/queues/{queue_id}/items/{instance_id}/comments",
    "/api/queues/{queue_id}/votes",
}
ADMIN_ROUTES = {
    "/admin/users",
    "/admin/users/{name}/link",
    "/admin/users/{name}/role",
    "/benchmarks/new",
    "/benchmarks/new/{upload}",
}
# Signed-out forms, protected by the double-submit login cookie (tests/accounts/test_auth.py).
PUBLIC_ROUTES = {"/login", "/signin/{secret}"}


def _post_paths() -> list[str]:
    """Every POST route of the app (FastAPI keeps included routers' routes on each router)."""
    app = create_app(Settings())
    paths = []
    for entry in app.routes:
        for route in getattr(getattr(entry, "original_router", None), "routes", [entry]):
            if isinstance(route, APIRoute) and "POST" in route.methods:
                paths.append(route.path)
    return sorted(set(paths))


def _required_role(path: str) -> str:
    if path in ANNOTATOR_ROUTES:
        return "annotator"
    return "admin" if path in ADMIN_ROUTES else "reviewer"


def _path(path: str, ids: dict[str, Any]) -> str:
    return re.sub(r"{(\w+)}", lambda m: str(ids[m.group(1)]), path)


def test_every_mutating_route_checks_role_and_csrf(store: Store, settings: Settings) -> None:
    reviewer, rcsrf = _login(settings, "rita", "reviewer")
    qid = _make_queue(reviewer, rcsrf)
    with transaction(store.factory) as s:
        iid = s.scalar(select(Instance.id).where(Instance.external_id == f.PAIRS[0].external_id))
    ids = {
        "queue_id": qid,
        "instance_id": iid,
        "job_id": 1,
        "name": f.PAIRWISE,
        "token_id": 1,
        "secret": "x",
        "upload": "0" * 32,
        "kind": "rank_errors",
    }
    clients = {
        role: _login(settings, f"u-{role}", role) for role in ("annotator", "reviewer", "admin")
    }
    anonymous = _OPEN.enter_context(TestClient(create_app(settings)))
    checked = 0
    for path in _post_paths():
        if path in PUBLIC_ROUTES:
            continue
        role = _required_role(path)
        url = _path(path, ids)
        # Signed out: refused before anything runs.
        r = anonymous.post(url, data={"x": "1"}, follow_redirects=False)
        assert r.status_code in (401, 303), (path, r.status_code)
        # Signed in with the role, without the CSRF token: 403.
        client, _ = clients[role]
        r = client.post(url, data={"x": "1"}, follow_redirects=False)
        assert r.status_code == 403, (path, r.status_code, r.text[:200])
        assert "CSRF" in r.text
        # Signed in, with the CSRF token, one role short: 403.
        order = ["annotator", "reviewer", "admin"]
        if order.index(role) > 0:
            lower, lower_csrf = clients[order[order.index(role) - 1]]
            r = lower.post(url, data={"csrf_token": lower_csrf}, follow_redirects=False)
            assert r.status_code == 403, (path, r.status_code)
            assert "role" in r.text
        checked += 1
    assert checked >= 20


def test_blind_annotators_never_receive_labels_or_scores(store: Store, settings: Settings) -> None:
    reviewer, rcsrf = _login(settings, "rita", "reviewer")
    qid = _make_queue(reviewer, rcsrf, blind="true")
    ann, acsrf = _login(settings, "ann", "annotator")
    # Another annotator's vote and a note that names a value must not reach "ann" either.
    bob, bcsrf = _login(settings, "bob", "annotator")
    iid, version = _item_form(bob, f"/queues/{qid}/next")
    bob.post(
        f"/queues/{qid}/items/{iid}/comments",
        data={"csrf_token": bcsrf, "body": "SECRET-NOTE reference looks like B"},
    )
    bob.post(
        f"/queues/{qid}/items/{iid}/vote",
        data={"csrf_token": bcsrf, "value": "B", "version": version, "reason": "SECRET-REASON"},
    )
    secrets_ = [
        "SECRET-NOTE",
        "SECRET-REASON",
        f.JUDGE,
        f.RM_1,
        f.RM_2,
        f.PROBE,
        "reward",
        "Original",
        "resolved",
        "unanimous",
        "adjudicat",
    ]
    with transaction(store.factory) as s:
        bench_ids = (
            select(Instance.id)
            .join(ReviewQueue, ReviewQueue.benchmark_id == Instance.benchmark_id)
            .where(ReviewQueue.id == qid)
        )
        ids = list(s.scalars(bench_ids))
    responses = []
    for iid_ in ids:
        responses.append(ann.get(f"/queues/{qid}/items/{iid_}"))
        responses.append(ann.get(f"/api/queues/{qid}/items/{iid_}"))
    responses += [
        ann.get("/queues"),
        ann.get(f"/queues/{qid}"),
        ann.get(f"/api/queues/{qid}"),
        ann.get("/account"),
        ann.get(f"/queues/{qid}/next"),
    ]
    # A stale write by the blind annotator: the 409 says the item changed, not how.
    stale = ann.post(
        f"/queues/{qid}/items/{iid}/vote",
        data={"csrf_token": acsrf, "value": "A", "version": version},
    )
    assert stale.status_code == 409
    responses.append(stale)
    for r in responses:
        if r.status_code == 200 and "application/json" in r.headers["content-type"]:
            body = r.json()
            assert not {"original", "resolved", "votes", "adjudication"} & set(body), body
        for needle in secrets_:
            assert needle not in r.text, (str(r.url), needle)
    # Every dashboard page and API read is closed to annotators.
    for url in (
        "/",
        f"/benchmarks/{f.PAIRWISE}",
        f"/benchmarks/{f.PAIRWISE}/metrics",
        f"/benchmarks/{f.PAIRWISE}/instances/pair-003-xss",
        "/api/benchmarks",
        f"/api/benchmarks/{f.PAIRWISE}/instances",
        "/jobs",
        "/probes",
    ):
        assert ann.get(url).status_code == 403, url

    # Two items whose labels differ render the same apart from their own text and ids.
    def skeleton(html: str) -> str:
        html = re.sub(r'<div class="model-text">.*?</div>', "", html, flags=re.S)
        # The item's own id (title, crumbs, heading) and numbers (ids, versions, tokens).
        html = re.sub(r'<title>.*?</title>|class="id">[^<]*<', "", html)
        return re.sub(r'\d+|name="csrf_token" value="[^"]*"|content="[^"]*"', "#", html)

    pages = {skeleton(ann.get(f"/queues/{qid}/items/{i}").text) for i in ids if i != iid}
    assert len(pages) == 1


def _race(url: str, requests: list[tuple[dict[str, str], dict[str, Any]]]) -> list[httpx.Response]:
    barrier = threading.Barrier(len(requests))
    out: list[httpx.Response | None] = [None] * len(requests)

    def go(k: int) -> None:
        headers, body = requests[k]
        with httpx.Client(timeout=60) as c:
            barrier.wait()
            out[k] = c.post(url, json=body, headers=headers)

    threads = [threading.Thread(target=go, args=(k,)) for k in range(len(requests))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [r for r in out if r is not None]


def test_concurrent_votes_and_adjudications_lose_nothing(store: Store, settings: Settings) -> None:
    reviewer, rcsrf = _login(settings, "rita", "reviewer")
    qid = _make_queue(reviewer, rcsrf)
    with transaction(store.factory) as s:
        queue = s.get(ReviewQueue, qid)
        assert queue is not None
        iid = s.scalar(select(Instance.id).where(Instance.external_id == f.PAIRS[1].external_id))
        before = s.scalar(select(func.count()).select_from(LabelEvent)) or 0
    with live_server(settings) as url:
        for path, people, role in (
            ("votes", ("ann", "bob"), "annotator"),
            ("adjudications", ("rita", "rex"), "reviewer"),
        ):
            got = httpx.get(
                f"{url}/api/queues/{qid}/items/{iid}", headers=bearer(settings, "rita", "reviewer")
            )
            assert got.status_code == 200, got.text
            state = got.json()
            calls = [
                (
                    bearer(settings, p, role),
                    {"instance_id": iid, "value": v, "version": state["version"]},
                )
                for p, v in zip(people, ("A", "B"), strict=True)
            ]
            results = _race(f"{url}/api/queues/{qid}/{path}", calls)
            codes = sorted(r.status_code for r in results)
            assert codes == [201, 409], [r.text for r in results]
            loser = next(r for r in results if r.status_code == 409).json()
            winner = next(r for r in results if r.status_code == 201).json()
            assert loser["version"] == winner["version"] > state["version"]
    with transaction(store.factory) as s:
        after = s.scalar(select(func.count()).select_from(LabelEvent)) or 0
        authors = sorted(
            s.scalars(
                select(LabelEvent.author).where(
                    LabelEvent.id > 0, LabelEvent.source.in_(("vote", "adjudication"))
                )
            )
        )
    # Exactly one vote and one adjudication were written; the losers wrote nothing.
    assert after - before == 2 and len(authors) == 2


def test_instance_page_shows_resolution_history_and_notes(store: Store, settings: Settings) -> None:
    reviewer, rcsrf = _login(settings, "rita", "reviewer")
    qid = _make_queue(reviewer, rcsrf, overlap_k="1")
    ext = f.PAIRS[1].external_id
    with transaction(store.factory) as s:
        iid = s.scalar(select(Instance.id).where(Instance.external_id == ext))
    state = reviewer.post(
        f"/api/queues/{qid}/items/{iid}/reveal", headers={"X-CSRF-Token": rcsrf}
    ).json()
    new = "A" if state["original"] == "B" else "B"
    r = reviewer.post(
        f"/api/queues/{qid}/votes",
        json={"instance_id": iid, "value": new, "version": state["version"]},
        headers={"X-CSRF-Token": rcsrf},
    )
    assert r.status_code == 201, r.text
    note = reviewer.post(
        f"/instances/{iid}/comments",
        data={"csrf_token": rcsrf, "body": "see <img src=x onerror=alert(9)>"},
        follow_redirects=False,
    )
    assert note.status_code == 303 and note.headers["location"].endswith("#comments")
    page = reviewer.get(note.headers["location"].split("#")[0]).text
    # k = 2 on the instance page: one vote shows in the history but does not resolve yet.
    assert "vote" in page and "rita" in page
    assert "see &lt;img src=x onerror=alert(9)&gt;" in page and "<img src=x" not in page


def test_a_finished_queue_says_so_and_its_instructions_are_markdown(
    store: Store, settings: Settings
) -> None:
    """Issue 21 item 3: "Annotate next item" stayed on a queue with nothing left to annotate."""
    reviewer, rcsrf = _login(settings, "rita", "reviewer")
    instructions = "**Check the key** first.\n\n- one\n- two <script>alert(9)</script>"
    qid = _make_queue(
        reviewer, rcsrf, query="q=zebra", overlap_k="1", instructions=instructions
    )  # one item
    ann, acsrf = _login(settings, "ann", "annotator")
    page = ann.get(f"/queues/{qid}").text
    assert 'id="annotate"' in page and 'id="queue-done"' not in page
    assert "<strong>Check the key</strong>" in page and "<li>one</li>" in page
    assert "<script>alert(9)" not in page and "&lt;script&gt;alert(9)" in page
    iid, version = _item_form(ann, f"/queues/{qid}/next")
    voted = ann.post(
        f"/queues/{qid}/items/{iid}/vote",
        data={"csrf_token": acsrf, "value": "A", "version": version},
        follow_redirects=False,
    )
    assert voted.status_code == 303, voted.text
    done = ann.get(f"/queues/{qid}/next")  # nothing left: back to the queue page
    assert done.url.path == f"/queues/{qid}" and done.url.params.get("done") == "1"
    assert 'id="queue-done"' in done.text and 'id="annotate"' not in done.text
    # The reviewer has voted on nothing, but the item has its one vote: done for them too.
    assert 'id="queue-done"' in reviewer.get(f"/queues/{qid}").text
