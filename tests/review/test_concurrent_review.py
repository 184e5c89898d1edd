"""One annotator's simultaneous undos and skips, over real HTTP, on SQLite and PostgreSQL.

Each request runs in its own server thread and database connection, so a check-then-write in
the service races exactly as it does under several browsers (or tabs) of one person.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.services.accounts.users import Principal, get_user, issue_token
from app.services.review import queues
from app.settings import Settings
from app.store import Store
from app.tables import Benchmark, Instance, LabelEvent, QueueSkip, Role, TokenKind, User
from app.web.auth import CSRF_HEADER, SESSION_COOKIE
from tests.support import factories as f
from tests.support.auth_support import ensure_user
from tests.support.live_server import live_server

RACERS = 10


@pytest.fixture
def store(settings: Settings, factory: sessionmaker[Session]) -> Iterator[Store]:
    f.seed_benchmarks(factory)  # ``factory`` empties the database after the test
    s = Store.open(settings)
    yield s
    s.close()


def _annotator_session(store: Store, name: str) -> tuple[Principal, dict[str, str]]:
    """``name`` as an annotator: their principal and the headers of one browser session."""
    ensure_user(store.settings, name, "annotator")
    with transaction(store.factory) as s:
        user = get_user(s, name)
        secret, token = issue_token(s, user, TokenKind.session)
        principal = Principal(user.id, user.name, Role.annotator, token.id, token.csrf_token)
    assert principal.csrf_token is not None
    headers = {"Cookie": f"{SESSION_COOKIE}={secret}", CSRF_HEADER: principal.csrf_token}
    return principal, headers


def _queue(store: Store) -> tuple[int, list[int]]:
    """A queue over every pair of the pairwise benchmark (k = 3): its id and item ids."""
    with transaction(store.factory) as s:
        bench = s.scalars(select(Benchmark).where(Benchmark.name == f.PAIRWISE)).one()
        ids = list(
            s.scalars(
                select(Instance.id).where(Instance.benchmark_id == bench.id).order_by(Instance.id)
            )
        )
        queue = queues.create_queue(
            s, bench, ids, name="race", label_name="reference", source="filter", overlap_k=3
        )
        return queue.id, ids


def _race(url: str, headers: dict[str, str], n: int = RACERS) -> list[int]:
    """POST ``url`` ``n`` times at once (one client each); the status codes."""
    barrier = threading.Barrier(n)
    codes: list[int] = []
    lock = threading.Lock()

    def go() -> None:
        with httpx.Client(timeout=120) as client:
            barrier.wait()
            code = client.post(url, headers=headers, follow_redirects=False).status_code
        with lock:
            codes.append(code)

    threads = [threading.Thread(target=go) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(codes) == n
    return sorted(codes)


def test_simultaneous_undos_withdraw_each_standing_vote_once(store: Store) -> None:
    qid, ids = _queue(store)
    ann, headers = _annotator_session(store, "ann")
    with transaction(store.write_factory) as s:
        queue = queues.get_queue(s, qid)
        for iid in ids:
            version = queues.label_version(s, iid, queue.label_name)
            queues.record(s, queue, iid, ann, kind="vote", value="A", seen_version=version)
    assert len(ids) == 6
    with live_server(store.settings) as url:
        codes = _race(f"{url}/queues/{qid}/undo", headers)
    assert codes == [303] * RACERS
    with transaction(store.factory) as s:
        queue = queues.get_queue(s, qid)
        withdrawals = dict(
            s.execute(
                select(LabelEvent.instance_id, func.count())
                .where(LabelEvent.author == "ann", LabelEvent.value.is_(None))
                .group_by(LabelEvent.instance_id)
            ).all()
        )
        standing = queues.progress(s, queue).votes_by_person
    # Six standing votes, ten undos: each vote withdrawn exactly once, four undos found nothing.
    assert withdrawals == dict.fromkeys(ids, 1)
    assert standing == {}


def test_simultaneous_skips_of_one_item_store_one_skip(store: Store) -> None:
    qid, ids = _queue(store)
    _, headers = _annotator_session(store, "ann")
    with live_server(store.settings) as url:
        codes = _race(f"{url}/queues/{qid}/items/{ids[0]}/skip", headers)
    assert codes == [303] * RACERS
    with transaction(store.factory) as s:
        skips = s.scalars(
            select(QueueSkip.instance_id)
            .join(User, User.id == QueueSkip.user_id)
            .where(User.name == "ann")
        ).all()
    assert skips == [ids[0]]
