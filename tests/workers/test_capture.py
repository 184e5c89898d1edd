"""Capture engine on tiny random Llama, Qwen3 and GPT-2 models: equivalence and every pitfall."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from workers.engines.capture import (  # noqa: E402 - after the importorskip guards
    BeforeMarker,
    EndOfTurn,
    ExplicitIndex,
    LastToken,
    PositionRule,
    _first_tensor,
    capture,
    decoder_blocks,
    iter_capture,
    parse_position_rule,
    plan_batches,
    resolve_positions,
)

VOCAB = 64
N_LAYERS = 4
D_MODEL = 32
EOT = 2  # also the pad token, as in SmolLM2
MARKER = (7, 8)
ARCHS = ("llama", "qwen3", "gpt2")


def tiny_model(arch: str, seed: int = 0) -> Any:
    """A random model; a large init scale keeps activations far from zero so differences show."""
    common = {"vocab_size": VOCAB, "initializer_range": 0.3, "pad_token_id": EOT}
    if arch == "gpt2":
        config = transformers.GPT2Config(
            n_embd=D_MODEL, n_layer=N_LAYERS, n_head=4, n_positions=128, **common
        )
    else:
        config_cls = transformers.LlamaConfig if arch == "llama" else transformers.Qwen3Config
        config = config_cls(
            hidden_size=D_MODEL,
            intermediate_size=64,
            num_hidden_layers=N_LAYERS,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=8,
            max_position_embeddings=128,
            **common,
        )
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


@pytest.fixture(scope="module", params=ARCHS)
def model(request: pytest.FixtureRequest) -> Any:
    return tiny_model(request.param)


@pytest.fixture(scope="module")
def llama() -> Any:
    return tiny_model("llama")


@pytest.fixture(scope="module")
def gpt2() -> Any:
    return tiny_model("gpt2")


def make_transcripts(n: int = 11, seed: int = 1) -> list[list[int]]:
    """Mixed lengths; EOT (= pad) inside and at the end, the marker near the end of each."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        body = [int(t) for t in rng.integers(3, VOCAB, size=int(rng.integers(3, 30)))]
        body = [t if t not in MARKER else 9 for t in body]
        body.insert(len(body) // 2, EOT)
        out.append([*body, *MARKER, 5, EOT])
    return out


def reference(model: Any, ids: list[int], pos: int, layers: list[int]) -> np.ndarray:
    """Per-item, unpadded, batch of one: ``hidden_states[i]``; a hook for layer L (pre-norm)."""
    blocks = decoder_blocks(model)
    last: dict[str, Any] = {}
    handle = blocks[-1].register_forward_hook(lambda _m, _a, o: last.update(out=_first_tensor(o)))
    try:
        with torch.no_grad():
            out = model(torch.tensor([ids]), output_hidden_states=True, use_cache=False)
    finally:
        handle.remove()
    hs = out.hidden_states
    rows = [(hs[i] if i < len(blocks) else last["out"])[0, pos] for i in layers]
    return torch.stack(rows).numpy()


def references(model: Any, transcripts: list[list[int]], rule: PositionRule, layers: list[int]):
    where = resolve_positions(transcripts, rule)
    return np.stack(
        [reference(model, t, int(p), layers) for t, p in zip(transcripts, where, strict=True)]
    )


_REFERENCES: dict[tuple[int, str], np.ndarray] = {}


def cached_references(model: Any, rule_name: str, layers: list[int]) -> np.ndarray:
    """References of ``make_transcripts()`` (they do not depend on the padding side)."""
    key = (id(model), rule_name)
    if key not in _REFERENCES:
        _REFERENCES[key] = references(model, make_transcripts(), RULES[rule_name], layers)
    return _REFERENCES[key]


LAYERS = [N_LAYERS, 0, 2, N_LAYERS - 1]  # any order: output columns follow it
RULES = {
    "last": LastToken(),
    "end_of_turn": EndOfTurn(EOT),
    "before_marker": BeforeMarker(MARKER),
    "explicit": ExplicitIndex(tuple((3 * i) % 8 for i in range(11))),
}


# --- equivalence


@pytest.mark.parametrize("padding_side", ["left", "right"])
@pytest.mark.parametrize("rule_name", list(RULES))
def test_capture_equals_unpadded_hidden_states(model: Any, padding_side: str, rule_name: str):
    transcripts = make_transcripts()
    rule = RULES[rule_name]
    got = capture(
        model,
        transcripts,
        positions=rule,
        layers=LAYERS,
        batch_size=4,
        padding_side=padding_side,
        pad_token_id=EOT,  # pad == end-of-turn, as in SmolLM2
    )
    want = cached_references(model, rule_name, LAYERS)
    assert got.shape == (len(transcripts), len(LAYERS), D_MODEL)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
    assert np.abs(want).max() > 0.1  # the comparison is not between near-zero vectors


def test_batch_size_and_order_do_not_matter(llama: Any):
    transcripts = make_transcripts(9, seed=3)
    one = capture(llama, transcripts, positions=LastToken(), layers=[1, 3], batch_size=1)
    many = capture(llama, transcripts, positions=LastToken(), layers=[1, 3], batch_size=5)
    np.testing.assert_allclose(one, many, atol=1e-4, rtol=0)


def test_iter_capture_yields_each_item_once_longest_first(llama: Any):
    transcripts = make_transcripts(7)
    seen: list[int] = []
    widths = []
    for items, values in iter_capture(
        llama, transcripts, positions=LastToken(), layers=[2], batch_size=3
    ):
        assert values.shape == (len(items), 1, D_MODEL)
        seen.extend(int(i) for i in items)
        widths.append(max(len(transcripts[i]) for i in items))
    assert sorted(seen) == list(range(7))
    assert widths == sorted(widths, reverse=True)


def test_output_dtypes(llama: Any):
    transcripts = make_transcripts(3)
    half = capture(llama, transcripts, positions=LastToken(), layers=[1], output_dtype="float16")
    assert half.dtype == np.float16
    assert (
        capture(llama, transcripts, positions=LastToken(), layers=[1], output_dtype="model").dtype
        == np.float32
    )


def test_training_mode_is_restored(llama: Any):
    llama.train()
    try:
        capture(llama, make_transcripts(2), positions=LastToken(), layers=[1])
        assert llama.training
    finally:
        llama.eval()


# --- pitfall 1: numbering


def test_numbering_hidden_states_k_plus_1_is_block_k_output(llama: Any):
    blocks = decoder_blocks(llama)
    outputs: dict[int, Any] = {}
    inputs: dict[int, Any] = {}
    handles = [
        b.register_forward_hook(lambda _m, _a, o, k=k: outputs.__setitem__(k, _first_tensor(o)))
        for k, b in enumerate(blocks)
    ] + [blocks[0].register_forward_pre_hook(lambda _m, a: inputs.__setitem__(0, a[0]))]
    ids = make_transcripts(1)[0]
    try:
        with torch.no_grad():
            hs = llama(torch.tensor([ids]), output_hidden_states=True).hidden_states
    finally:
        for h in handles:
            h.remove()
    assert len(hs) == N_LAYERS + 1
    torch.testing.assert_close(hs[0], inputs[0])
    for k in range(N_LAYERS - 1):
        torch.testing.assert_close(hs[k + 1], outputs[k])
        # The off-by-one reading (hidden_states[k] for block k) is a different vector.
        assert not torch.allclose(hs[k], outputs[k], atol=1e-3)
    got = capture(llama, [ids], positions=LastToken(), layers=list(range(N_LAYERS)))
    for k in range(1, N_LAYERS):
        np.testing.assert_allclose(got[0, k], outputs[k - 1][0, -1].numpy(), atol=1e-5)
    np.testing.assert_allclose(got[0, 0], inputs[0][0, -1].numpy(), atol=1e-6)


# --- pitfall 2: post-norm


def test_last_layer_is_block_output_not_post_norm(model: Any):
    ids = make_transcripts(1)[0]
    blocks = decoder_blocks(model)
    kept: dict[str, Any] = {}
    handle = blocks[-1].register_forward_hook(lambda _m, _a, o: kept.update(out=_first_tensor(o)))
    try:
        with torch.no_grad():
            hs = model(torch.tensor([ids]), output_hidden_states=True).hidden_states
    finally:
        handle.remove()
    block_out = kept["out"][0, -1].numpy()
    post_norm = hs[-1][0, -1].numpy()  # the wrong reading: transformers puts the final norm here
    ours = capture(model, [ids], positions=LastToken(), layers=[N_LAYERS])[0, 0]
    np.testing.assert_allclose(ours, block_out, atol=1e-5)
    assert np.abs(ours - post_norm).max() > 1e-2
    # L - 1 (the seed's "penultimate layer") is a real hidden_states entry and ours agrees.
    penult = capture(model, [ids], positions=LastToken(), layers=[N_LAYERS - 1])[0, 0]
    np.testing.assert_allclose(penult, hs[N_LAYERS - 1][0, -1].numpy(), atol=1e-5)


@pytest.mark.parametrize("bad", [[-1], [N_LAYERS + 1], [], [1, 1]])
def test_layers_are_validated(llama: Any, bad: list[int]):
    with pytest.raises(ValueError):
        capture(llama, make_transcripts(2), positions=LastToken(), layers=bad)


# --- pitfall 3: tensor vs tuple


def test_decoder_layer_returns_tensor_and_index_0_is_batch_row(llama: Any):
    transcripts = [t[:6] for t in make_transcripts(2)]
    block = decoder_blocks(llama)[0]
    seen: dict[str, Any] = {}
    handle = block.register_forward_hook(lambda _m, _a, o: seen.update(out=o))
    try:
        with torch.no_grad():
            llama(torch.tensor(transcripts))
    finally:
        handle.remove()
    out = seen["out"]
    assert isinstance(out, torch.Tensor) and out.shape == (2, 6, D_MODEL)
    # The transformers 4 idiom ``output[0]`` silently takes batch row 0, not the hidden states.
    assert out[0].shape == (6, D_MODEL)
    torch.testing.assert_close(out[0], out[0:1].squeeze(0))
    # Our hooks accept both conventions.
    assert _first_tensor(out) is out
    assert _first_tensor((out, None)) is out


# --- pitfall 4: right padding


def test_right_padding_last_column_reads_pad_but_gather_does_not(llama: Any):
    transcripts = [t[:-1] for t in make_transcripts(5)]  # no trailing EOT: pad differs from text
    layers = [2]
    batch = plan_batches(
        transcripts, resolve_positions(transcripts, LastToken()), batch_size=5, pad_token_id=EOT
    )[0]
    with torch.no_grad():
        hs = llama(
            batch.input_ids,
            attention_mask=batch.attention_mask,
            output_hidden_states=True,
        ).hidden_states[2]
    naive = hs[:, -1].numpy()  # the wrong reading
    want = references(llama, transcripts, LastToken(), layers)[batch.items, 0]
    short = batch.attention_mask.sum(-1).numpy() < batch.input_ids.shape[1]
    assert short.any()
    assert np.abs(naive[short] - want[short]).max() > 1e-2
    ours = capture(llama, transcripts, positions=LastToken(), layers=layers, padding_side="right")
    np.testing.assert_allclose(ours[batch.items, 0], want, atol=1e-4)


# --- pitfall 5: left padding


def test_left_padding_needs_position_ids_for_absolute_positions(gpt2: Any):
    transcripts = make_transcripts(5)
    batch = plan_batches(
        transcripts,
        resolve_positions(transcripts, LastToken()),
        batch_size=5,
        padding_side="left",
        pad_token_id=EOT,
    )[0]
    with torch.no_grad():
        naive = gpt2(
            batch.input_ids, attention_mask=batch.attention_mask, output_hidden_states=True
        ).hidden_states[2][:, -1]  # no position_ids: the short rows start at position > 0
    want = references(gpt2, transcripts, LastToken(), [2])[batch.items, 0]
    short = batch.attention_mask.sum(-1).numpy() < batch.input_ids.shape[1]
    assert np.abs(naive.numpy()[short] - want[short]).max() > 1e-2
    ours = capture(gpt2, transcripts, positions=LastToken(), layers=[2], padding_side="left")
    np.testing.assert_allclose(ours[batch.items, 0], want, atol=1e-4)
    # Position ids come from the mask: 0 at each row's first real token.
    first_real = batch.attention_mask.argmax(-1)
    assert (batch.position_ids[torch.arange(5), first_real] == 0).all()


# --- pitfall 6: pad == EOT


def test_masks_come_from_lengths_when_pad_is_end_of_turn(llama: Any):
    transcripts = make_transcripts(6)
    assert all(t[-1] == EOT for t in transcripts)
    where = resolve_positions(transcripts, EndOfTurn(EOT))
    batch = plan_batches(transcripts, where, batch_size=6, pad_token_id=EOT)[0]
    np.testing.assert_array_equal(
        batch.attention_mask.sum(-1).numpy(), [len(transcripts[i]) for i in batch.items]
    )
    # The wrong mask drops every EOT, including the one we want to read.
    naive_mask = (batch.input_ids != EOT).long()
    naive_last = naive_mask.sum(-1) - 1
    assert (naive_mask.sum(-1) < batch.attention_mask.sum(-1)).all()
    with torch.no_grad():
        hs = llama(
            batch.input_ids, attention_mask=naive_mask, output_hidden_states=True
        ).hidden_states[3]
    naive = hs[torch.arange(6), naive_last].numpy()
    want = references(llama, transcripts, EndOfTurn(EOT), [3])[batch.items, 0]
    assert np.abs(naive - want).max() > 1e-2
    ours = capture(llama, transcripts, positions=EndOfTurn(EOT), layers=[3], pad_token_id=EOT)
    np.testing.assert_allclose(ours[batch.items, 0], want, atol=1e-4)


# --- pitfall 8: memory


class CallCounter:
    """Counts forward calls per module name and records the base model's keyword arguments."""

    def __init__(self, model: Any) -> None:
        self.calls: Counter[str] = Counter()
        self.base_kwargs: list[dict[str, Any]] = []
        self.handles = []
        for name, module in model.named_modules():
            self.handles.append(
                module.register_forward_hook(lambda _m, _a, _o, n=name: self.calls.update([n]))
            )
        self.handles.append(
            model.base_model.register_forward_pre_hook(
                lambda _m, _a, kw: self.base_kwargs.append(dict(kw)), with_kwargs=True
            )
        )

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


@pytest.fixture
def counted(llama: Any) -> Iterator[CallCounter]:
    counter = CallCounter(llama)
    yield counter
    counter.remove()


def test_no_logits_and_no_block_after_the_deepest(llama: Any, counted: CallCounter):
    transcripts = make_transcripts(6)
    capture(llama, transcripts, positions=LastToken(), layers=[0, 2], batch_size=3)
    n_batches = 2
    assert counted.calls["lm_head"] == 0
    assert counted.calls["model.norm"] == 0
    assert counted.calls["model.layers.0"] == n_batches
    assert counted.calls["model.layers.1"] == n_batches
    assert counted.calls["model.layers.2"] == 0
    assert counted.calls["model.layers.3"] == 0
    assert len(counted.base_kwargs) == n_batches
    for kwargs in counted.base_kwargs:
        assert kwargs["use_cache"] is False
        assert kwargs["output_hidden_states"] is False


def test_layer_zero_alone_runs_no_block(llama: Any, counted: CallCounter):
    capture(llama, make_transcripts(2), positions=LastToken(), layers=[0])
    assert not [n for n in counted.calls if n.startswith("model.layers.")]


def test_hooks_are_removed_even_on_error(llama: Any):
    def n_hooks() -> int:
        return sum(len(b._forward_hooks) + len(b._forward_pre_hooks) for b in blocks)

    blocks = decoder_blocks(llama)
    before = n_hooks()
    with pytest.raises(ValueError):
        capture(llama, [[3, 4], []], positions=LastToken(), layers=[1])

    def failing_batches() -> Iterator[Any]:
        yield from iter_capture(llama, [[3, 4, 5]], positions=LastToken(), layers=[1, 2])
        raise RuntimeError("consumer failed")

    with pytest.raises(RuntimeError):
        list(failing_batches())
    assert n_hooks() == before


# --- position rules


def test_position_rules_resolve():
    ids = [1, 7, 8, EOT, 4, 7, 8, 5, EOT, 6]
    assert resolve_positions([ids], LastToken()).tolist() == [9]
    assert resolve_positions([ids], EndOfTurn(EOT)).tolist() == [8]
    assert resolve_positions([ids], BeforeMarker((7, 8))).tolist() == [4]
    assert resolve_positions([ids], ExplicitIndex((3,))).tolist() == [3]


@pytest.mark.parametrize(
    ("ids", "rule"),
    [
        ([3, 4], EndOfTurn(EOT)),
        ([7, 8, 3], BeforeMarker((7, 8))),  # marker at the start: nothing before it
        ([3, 4], ExplicitIndex((2,))),
        ([3, 4], ExplicitIndex((-1,))),
        ([], LastToken()),
    ],
)
def test_position_rules_refuse(ids: list[int], rule: PositionRule):
    with pytest.raises(ValueError):
        resolve_positions([ids], rule)


def test_position_rule_text_round_trip():
    for rule in (LastToken(), EndOfTurn(2), BeforeMarker((5, 6, 7))):
        assert parse_position_rule(rule.describe()) == rule
    with pytest.raises(ValueError):
        parse_position_rule("explicit")
    with pytest.raises(ValueError):
        parse_position_rule("end_of_turn:x")
