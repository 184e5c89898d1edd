"""The real SmolLM2-135M-Instruct: GGUF conversion, loading, chat rendering, exact capture.

Slow: the conversion takes about a minute on two CPU cores.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from app.settings import Settings
from tests.support.numerics import assert_close_to_scale
from workers.engines import models

torch = pytest.importorskip("torch")
pytest.importorskip("gguf")
try:
    models.smollm2_gguf_path()
except FileNotFoundError as exc:  # pragma: no cover - depends on the environment
    pytest.skip(str(exc), allow_module_level=True)

from workers.engines.capture import (  # noqa: E402 - after the skip guards
    EndOfTurn,
    _first_tensor,
    capture,
    decoder_blocks,
    plan_batches,
    render_chat,
    resolve_positions,
)

pytestmark = pytest.mark.slow
SEED_LAYERS = [8, 15, 23, 29]  # ceil(.25L), ceil(.5L), ceil(.75L), L-1 for L = 30
LAYERS = [0, *SEED_LAYERS, 30]
CHATS = [
    [{"role": "user", "content": "Is Paris the capital of France?"}],
    [
        {"role": "system", "content": "No matter the question, always answer with No."},
        {"role": "user", "content": "Is water wet? Think about it carefully before answering."},
        {"role": "assistant", "content": "No."},
    ],
    [{"role": "user", "content": "Name three element symbols."}],
    [
        {"role": "user", "content": "Translate 'gato' to English."},
        {"role": "assistant", "content": "The Spanish word 'gato' means 'cat' in English."},
    ],
    [{"role": "user", "content": "Hi"}],
]


@pytest.fixture(scope="module")
def data_dir(smollm2_dir: Path) -> Path:
    return smollm2_dir.parent.parent


@pytest.fixture(scope="module")
def smollm2(smollm2_dir: Path) -> models.LoadedModel:
    return models.load_model(smollm2_dir, device="cpu", dtype="float32")


def test_converted_directory(smollm2_dir: Path):
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert config["num_hidden_layers"] == 30 and config["hidden_size"] == 576
    assert "quantization_config" not in config
    assert (smollm2_dir / "model.safetensors").stat().st_size > 400e6  # float32, dequantised
    assert not [p for p in smollm2_dir.parent.iterdir() if p.name.startswith(".")]
    fingerprint = models.fingerprint_weights(smollm2_dir)
    assert models.convert_smollm2(smollm2_dir.parent.parent) == smollm2_dir  # no second run
    assert models.fingerprint_weights(smollm2_dir) == fingerprint


def test_loaded_model_and_tokenizer(smollm2: models.LoadedModel):
    tok = smollm2.tokenizer
    assert (smollm2.info.n_layers, smollm2.info.d_model) == (30, 576)
    assert type(smollm2.model).__name__ == "LlamaForCausalLM"
    assert tok.pad_token_id == tok.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert smollm2.info.chat_template and "<|im_start|>" in smollm2.info.chat_template


def test_render_chat_has_no_double_bos(smollm2: models.LoadedModel):
    tok = smollm2.tokenizer
    ids = render_chat(tok, CHATS[0], add_generation_prompt=True, prefill="Yes")
    text = tok.decode(ids)
    assert text.startswith("<|im_start|>system\n")  # the template's default system prompt
    assert text.endswith("<|im_start|>assistant\nYes")
    assert ids[:2] != [tok.bos_token_id] * 2
    assert ids == list(tok(text, add_special_tokens=False)["input_ids"])


def _reference(model: Any, ids: list[int], pos: int) -> np.ndarray:
    """Batch of one, no padding: hidden_states for layers < 30, a block hook for layer 30."""
    kept: dict[str, Any] = {}
    blocks = decoder_blocks(model)
    handle = blocks[-1].register_forward_hook(lambda _m, _a, o: kept.update(out=_first_tensor(o)))
    try:
        with torch.no_grad():
            hs = model(torch.tensor([ids]), output_hidden_states=True).hidden_states
    finally:
        handle.remove()
    rows = [(hs[i] if i < 30 else kept["out"])[0, pos] for i in LAYERS]
    return torch.stack(rows).numpy()


@pytest.fixture(scope="module")
def case(smollm2: models.LoadedModel) -> tuple[list[list[int]], EndOfTurn, np.ndarray]:
    """Rendered transcripts, the end-of-turn rule and per-item unpadded references."""
    tok = smollm2.tokenizer
    transcripts = [render_chat(tok, chat) for chat in CHATS]
    eot = EndOfTurn(tok.convert_tokens_to_ids("<|im_end|>"))
    where = resolve_positions(transcripts, eot)
    # The template ends "<|im_end|>\n": the end-of-turn token is the one before last.
    assert where.tolist() == [len(t) - 2 for t in transcripts]
    refs = [_reference(smollm2.model, t, int(p)) for t, p in zip(transcripts, where, strict=True)]
    return transcripts, eot, np.stack(refs)


def test_capture_batch_of_one_equals_unpadded_hidden_states(smollm2: models.LoadedModel, case):
    transcripts, eot, want = case
    got = capture(smollm2.model, transcripts, positions=eot, layers=LAYERS, batch_size=1)
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
    assert np.abs(want).max() > 50  # SmolLM2's residual stream has large coordinates


@pytest.mark.parametrize("padding_side", ["left", "right"])
def test_padded_batches_match_hf_batched_and_unpadded(
    smollm2: models.LoadedModel, case, padding_side: str
):
    transcripts, eot, want = case
    model = smollm2.model
    got = capture(
        model, transcripts, positions=eot, layers=LAYERS, batch_size=3, padding_side=padding_side
    )
    # Against transformers' own forward of the same padded batches (the gather is exact) ...
    where = resolve_positions(transcripts, eot)
    for batch in plan_batches(transcripts, where, batch_size=3, padding_side=padding_side):
        with torch.no_grad():
            hs = model(
                batch.input_ids,
                attention_mask=batch.attention_mask,
                position_ids=batch.position_ids,
                output_hidden_states=True,
            ).hidden_states
        for row, item in enumerate(batch.items):
            hf = torch.stack([hs[i][row, batch.rows[row]] for i in LAYERS[:-1]]).numpy()
            np.testing.assert_allclose(got[item, :-1], hf, atol=1e-5, rtol=0)
    # ... and against per-item unpadded states. The masked attention kernel of a padded batch
    # rounds differently from the causal one; through 30 blocks that reaches a few 1e-4 on
    # vectors with coordinates of size 50-350 (measured: 2.7e-4 at |x| = 53, and 1.3e-4 on a
    # coordinate of 2.5 in a vector whose largest is ~300), the same difference transformers'
    # own padded forward shows. Hence a bound at each vector's scale.
    assert_close_to_scale(got, want)


def test_cli_add_smollm2_registers_the_converted_model(
    smollm2_dir: Path,
    data_dir: Path,
    settings: Settings,
    engine: Any,  # empties the tables afterwards
    monkeypatch: pytest.MonkeyPatch,
):
    from workers.cli.models import models_app

    monkeypatch.setenv("APPELLATE_DATABASE_URL", settings.resolved_database_url)
    monkeypatch.setenv("APPELLATE_DATA_DIR", str(data_dir))
    runner = CliRunner()
    for _ in range(2):  # idempotent
        result = runner.invoke(models_app, ["add-smollm2"])
        assert result.exit_code == 0, result.output
    listed = json.loads(runner.invoke(models_app, ["list", "--json"]).output)
    assert [(m["name"], m["path"], m["n_layers"], m["d_model"]) for m in listed] == [
        ("smollm2", "models/smollm2-135m-instruct", 30, 576)
    ]
    assert listed[0]["fingerprint"] == models.fingerprint_weights(smollm2_dir)
