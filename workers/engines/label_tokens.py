"""Token ids of short answer labels (verdict letters, option letters) after a fixed prefix."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


def single_token_ids(
    tokenizer: PreTrainedTokenizerBase, prefix: str, labels: Sequence[str]
) -> tuple[list[int], list[int]]:
    """The ids of the prefix and of each label as the one token that follows it.

    Parameters
    ----------
    tokenizer
        The model's tokenizer.
    prefix
        Text the labels follow (e.g. ``"VERDICT:"``).
    labels
        Label texts, each with its separator (e.g. ``" A"``).

    Returns
    -------
    (prefix_ids, label_ids)
        ``label_ids[i]`` is the token of ``labels[i]``.

    Raises
    ------
    ValueError
        If a label is split into several tokens or merges with the prefix.

    """
    prefix_ids = list(tokenizer(prefix, add_special_tokens=False)["input_ids"])
    out = []
    for label in labels:
        ids = list(tokenizer(prefix + label, add_special_tokens=False)["input_ids"])
        if ids[: len(prefix_ids)] != prefix_ids or len(ids) != len(prefix_ids) + 1:
            raise ValueError(
                f"label {label!r} is not a single token after {prefix!r} for this tokenizer "
                f"({ids}); choose other labels"
            )
        out.append(ids[-1])
    return prefix_ids, out
