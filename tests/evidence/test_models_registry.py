"""Language model registry service on both dialects: idempotent register, conflicts, lookups."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import Conflict, NotFound
from app.services.evidence.language_models import (
    get_language_model,
    list_language_models,
    register_language_model,
)

FP = "sha256:" + "a" * 64


def _register(session: Session, name: str = "tiny", **changes: object):
    fields: dict[str, object] = {"path": "models/tiny", "fingerprint": FP, "dtype": "auto"}
    fields.update(changes)
    return register_language_model(
        session, name, n_layers=4, d_model=32, chat_template="{{ x }}", **fields
    )


def test_register_then_get_and_list(factory: sessionmaker[Session]):
    with transaction(factory) as session:
        created = _register(session)
        _register(session, "another", path="/abs/other")
        assert created.id is not None
    with transaction(factory) as session:
        model = get_language_model(session, "tiny")
        assert (model.path, model.fingerprint, model.n_layers, model.d_model) == (
            "models/tiny",
            FP,
            4,
            32,
        )
        assert model.chat_template == "{{ x }}"
        assert [m.name for m in list_language_models(session)] == ["another", "tiny"]


def test_register_is_idempotent(factory: sessionmaker[Session]):
    with transaction(factory) as session:
        first_id = _register(session).id
    with transaction(factory) as session:
        assert _register(session).id == first_id
        assert len(list_language_models(session)) == 1


@pytest.mark.parametrize(
    "change",
    [{"path": "models/elsewhere"}, {"fingerprint": "sha256:" + "b" * 64}, {"dtype": "bfloat16"}],
)
def test_conflicting_register_is_refused(factory: sessionmaker[Session], change: dict[str, str]):
    with transaction(factory) as session:
        _register(session)
    with pytest.raises(Conflict, match=next(iter(change))), transaction(factory) as session:
        _register(session, **change)
    with transaction(factory) as session:
        assert get_language_model(session, "tiny").path == "models/tiny"


def test_unknown_model_is_not_found(factory: sessionmaker[Session]):
    with pytest.raises(NotFound), transaction(factory) as session:
        get_language_model(session, "missing")
