"""Chat rendering for capture: templates tokenized without special tokens (no double BOS)."""

from __future__ import annotations

from typing import Any

import pytest

transformers = pytest.importorskip("transformers")
tokenizers = pytest.importorskip("tokenizers")

from workers.engines.capture import check_single_bos, render_chat  # noqa: E402 - after the guards

WORDS = ["<unk>", "<s>", "</s>", "<eot>", "system", "user", "assistant", ":", "hi", "be", "brief"]
# A Llama-3-like setup: the template writes BOS itself and the tokenizer also adds one.
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} <eot> "
    "{% endfor %}{% if add_generation_prompt %}assistant : {% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from tokenizers import Tokenizer, models, pre_tokenizers, processors

    vocab = {w: i for i, w in enumerate(WORDS)}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", vocab["<s>"])]
    )
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    tok.chat_template = TEMPLATE
    return tok


MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


def test_naive_tokenization_doubles_bos(tokenizer: Any):
    text = tokenizer.apply_chat_template(MESSAGES, tokenize=False)
    naive = tokenizer(text)["input_ids"]  # the wrong way: add_special_tokens defaults to True
    assert naive[:2] == [tokenizer.bos_token_id] * 2
    with pytest.raises(ValueError, match="double BOS"):
        check_single_bos(naive, tokenizer.bos_token_id)


def test_render_chat_has_one_bos(tokenizer: Any):
    ids = render_chat(tokenizer, MESSAGES)
    assert ids[0] == tokenizer.bos_token_id and ids[1] != tokenizer.bos_token_id
    assert ids.count(tokenizer.bos_token_id) == 1
    assert tokenizer.decode(ids) == "<s> system : be brief <eot> user : hi <eot>"


def test_render_chat_with_generation_prompt_and_prefill(tokenizer: Any):
    ids = render_chat(tokenizer, MESSAGES, add_generation_prompt=True, prefill="hi")
    assert tokenizer.convert_ids_to_tokens(ids[-3:]) == ["assistant", ":", "hi"]
    with pytest.raises(ValueError, match="add_generation_prompt"):
        render_chat(tokenizer, MESSAGES, prefill="hi")


def test_check_single_bos_accepts_normal_transcripts(tokenizer: Any):
    bos = tokenizer.bos_token_id
    rendered = render_chat(tokenizer, MESSAGES, add_generation_prompt=True)
    assert rendered[0] == bos and rendered[1] != bos  # a real transcript: one leading BOS
    # A BOS later on (a second conversation appended), an empty or one-token transcript.
    normal = [rendered, rendered + rendered, [bos], [], [1, 4, 1]]
    for ids in normal:
        assert check_single_bos(ids, bos) is None, ids
    # A tokenizer without a BOS token has nothing to double.
    assert check_single_bos([1, 1], None) is None
    assert check_single_bos([], 1) is None
    # The same check refuses a doubled start, so the acceptances above are decisions.
    with pytest.raises(ValueError, match="double BOS"):
        check_single_bos([bos, *rendered], bos)
