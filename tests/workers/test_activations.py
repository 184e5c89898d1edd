"""Activation files and rows: round trip in instance order, resume without duplicates, specs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sqlalchemy.orm import Session, sessionmaker

from app.db import transaction
from app.errors import Conflict, InvalidInput, NotFound
from app.services.evidence.activation_sets import (
    ensure_activation_set,
    get_activation_set,
    list_activation_sets,
    set_instance_order,
)
from app.services.evidence.benchmarks import ensure_benchmark
from app.settings import Settings
from workers.engines.activations import (
    ShardFiles,
    open_activation_set,
    read_activation_set,
    relative_set_path,
    shard_files,
    sync_instance_order,
)

LAYERS = [8, 15, 23, 29]
D = 6
FP = "sha256:" + "c" * 64


def _values(ids: list[int]) -> np.ndarray:
    """Distinct, recognisable rows: value = instance id + layer column / 10."""
    base = np.asarray(ids, dtype=np.float32)[:, None, None]
    cols = np.arange(len(LAYERS), dtype=np.float32)[None, :, None] / 10
    return np.broadcast_to(base + cols, (len(ids), len(LAYERS), D))


def _open(session: Session, name: str = "jb-smollm2-eot", **changes: object):
    benchmark = ensure_benchmark(session, "jb", "pairwise")
    fields: dict[str, object] = {
        "benchmark_id": benchmark.id,
        "model_fingerprint": FP,
        "layers": LAYERS,
        "position_rule": "end_of_turn:2",
        "d_model": D,
    }
    fields.update(changes)
    return open_activation_set(session, name, **fields)


def _write_batch(factory: sessionmaker[Session], data_dir: Path, ids: list[int]) -> list[int]:
    """What a capture job does per batch: write the shard (no session), then a short update."""
    with transaction(factory) as session:
        row = get_activation_set(session, "jb-smollm2-eot")
        files = shard_files(data_dir, row)
    written = files.append(ids, _values(ids))
    with transaction(factory) as session:
        sync_instance_order(session, data_dir, get_activation_set(session, "jb-smollm2-eot"))
    return written


def test_round_trip_in_instance_order(settings: Settings, factory: sessionmaker[Session]):
    with transaction(factory) as session:
        row = _open(session)
        assert row.path == "activations/jb-smollm2-eot"
        assert row.instance_ids == []
    _write_batch(factory, settings.data_dir, [30, 10, 20])
    _write_batch(factory, settings.data_dir, [5, 40])
    with transaction(factory) as session:
        row = get_activation_set(session, "jb-smollm2-eot")
        assert row.instance_ids == [30, 10, 20, 5, 40]
        got = read_activation_set(settings.data_dir, row)
    assert got.layers == LAYERS
    assert got.instance_ids == [30, 10, 20, 5, 40]
    assert got.values.shape == (5, len(LAYERS), D) and got.values.dtype == np.float32
    np.testing.assert_array_equal(got.values, _values([30, 10, 20, 5, 40]))
    assert (settings.data_dir / "activations" / "jb-smollm2-eot").is_dir()


def test_resume_does_not_duplicate(settings: Settings, factory: sessionmaker[Session]):
    with transaction(factory) as session:
        _open(session)
    _write_batch(factory, settings.data_dir, [1, 2, 3])
    # The job is killed after writing the next shard but before recording it in the row.
    with transaction(factory) as session:
        files = shard_files(settings.data_dir, get_activation_set(session, "jb-smollm2-eot"))
    files.append([4, 5], _values([4, 5]))
    with transaction(factory) as session:
        row = get_activation_set(session, "jb-smollm2-eot")
        assert row.instance_ids == [1, 2, 3]
        # Readers see only what the row records.
        assert read_activation_set(settings.data_dir, row).instance_ids == [1, 2, 3]
    # On resume the job reopens the set, syncs from the files and redoes a batch that overlaps.
    with transaction(factory) as session:
        row = _open(session)
        assert sync_instance_order(session, settings.data_dir, row) == 5
    assert _write_batch(factory, settings.data_dir, [5, 6]) == [6]
    assert _write_batch(factory, settings.data_dir, [1, 6]) == []
    with transaction(factory) as session:
        got = read_activation_set(settings.data_dir, get_activation_set(session, "jb-smollm2-eot"))
    assert got.instance_ids == [1, 2, 3, 4, 5, 6]
    np.testing.assert_array_equal(got.values, _values([1, 2, 3, 4, 5, 6]))
    assert len(files.shards()) == 3


def test_killed_write_leaves_no_shard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    files = ShardFiles(tmp_path / "set", n_layers=len(LAYERS), d_model=D, dtype="float32")
    files.append([1], _values([1]))

    def dies(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("safetensors.numpy.save_file", dies)
    with pytest.raises(KeyboardInterrupt):
        files.append([2], _values([2]))
    assert files.done_ids() == [1]
    assert sorted(p.name for p in (tmp_path / "set").iterdir()) == ["shard-000000.safetensors"]


def test_shard_files_validate_batches(tmp_path: Path):
    files = ShardFiles(tmp_path / "set", n_layers=len(LAYERS), d_model=D, dtype="float16")
    with pytest.raises(ValueError, match="repeated"):
        files.append([1, 1], _values([1, 1]))
    with pytest.raises(ValueError, match="match"):
        files.append([1, 2], _values([1]))
    files.append([7], _values([7]))
    ids, values = files.read()
    assert ids == [7] and values.dtype == np.float16
    with pytest.raises(ValueError, match="storage dtype"):
        ShardFiles(tmp_path / "x", n_layers=1, d_model=1, dtype="bfloat16")


def test_empty_set_reads_empty(settings: Settings, factory: sessionmaker[Session]):
    with transaction(factory) as session:
        got = read_activation_set(settings.data_dir, _open(session))
    assert got.values.shape == (0, len(LAYERS), D) and got.instance_ids == []


def test_missing_values_are_an_error(settings: Settings, factory: sessionmaker[Session]):
    with transaction(factory) as session:
        row = _open(session)
        set_instance_order(session, row, [1, 2])
        with pytest.raises(ValueError, match="no stored values"):
            read_activation_set(settings.data_dir, row)


@pytest.mark.parametrize(
    "change",
    [
        {"layers": [8, 15]},
        {"position_rule": "last"},
        {"model_fingerprint": "sha256:" + "d" * 64},
        {"d_model": D + 1},
        {"dtype": "float16"},
    ],
)
def test_reopening_with_another_spec_conflicts(
    factory: sessionmaker[Session], change: dict[str, object]
):
    with transaction(factory) as session:
        _open(session)
    with pytest.raises(Conflict), transaction(factory) as session:
        _open(session, **change)


def test_service_lookups_and_validation(factory: sessionmaker[Session]):
    with transaction(factory) as session:
        first = _open(session, "b-set")
        _open(session, "a-set")
        assert [s.name for s in list_activation_sets(session)] == ["a-set", "b-set"]
        assert [s.name for s in list_activation_sets(session, first.benchmark_id + 1)] == []
        with pytest.raises(InvalidInput, match="repeated"):
            set_instance_order(session, first, [1, 1])
        with pytest.raises(InvalidInput, match="inside the data directory"):
            ensure_activation_set(
                session,
                "bad",
                benchmark_id=first.benchmark_id,
                model_fingerprint=FP,
                path="../outside",
                layers=[1],
                position_rule="last",
                dtype="float32",
                d_model=D,
            )
    with pytest.raises(NotFound), transaction(factory) as session:
        get_activation_set(session, "missing")


def test_relative_set_paths_are_safe_and_distinct():
    assert relative_set_path("jb-smollm2_eot.v1") == "activations/jb-smollm2_eot.v1"
    odd = [relative_set_path(n) for n in ("a/b", "a b", "../x", "a:b")]
    assert all(p.startswith("activations/") and ".." not in p.split("/") for p in odd)
    assert all("/" not in p.removeprefix("activations/") for p in odd)
    assert len(set(odd)) == len(odd)
