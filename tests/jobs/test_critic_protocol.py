"""The critic protocol without a model: strict parsing, prompts, probabilities, parameters.

A bad output has no verdict and says why (it is counted by the job, never guessed); the
probabilities are the softmax of the verdict labels' scores, checked against numpy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from app.errors import InvalidInput
from app.services.jobs.critic import CriticParams
from app.services.jobs.critic_protocol import (
    NO_OPTIONS,
    VERDICTS,
    defect_probability,
    parse_verdict,
    render_item,
    verdict_probabilities,
)
from app.services.jobs.critic_results import CriticVerdict
from workers.engines.critic import read_critique

GOOD = [
    ("The key is B and B is right.\nVERDICT: correct", "correct"),
    ("Option C is the right one.\n\nVERDICT: wrong\n", "wrong"),
    ("VERDICT:invalid", "invalid"),
    ("  VERDICT: invalid  \n\n", "invalid"),
]
BAD = [
    ("The answer key is correct.", "no final"),
    ("VERDICT: Correct", "no final"),  # the label is spelled exactly
    ("VERDICT: correct.", "no final"),
    ("VERDICT: maybe", "no final"),
    ("VERDICT: correct\nBecause B is right.", "no final"),  # not the last line
    ("I think VERDICT: wrong", "no final"),  # not a line of its own
    ("VERDICT: wrong\nVERDICT: correct", "more than one"),
    ("", "no final"),
]


@pytest.mark.parametrize(("text", "verdict"), GOOD)
def test_a_well_formed_output_gives_its_verdict(text: str, verdict: str) -> None:
    parsed = parse_verdict(text)
    assert (parsed.verdict, parsed.error, parsed.valid) == (verdict, None, True)


@pytest.mark.parametrize(("text", "reason"), BAD)
def test_a_bad_output_has_no_verdict_and_says_why(text: str, reason: str) -> None:
    parsed = parse_verdict(text)
    assert parsed.verdict is None and not parsed.valid
    assert parsed.error is not None and reason in parsed.error


def test_probabilities_are_the_softmax_of_the_label_scores() -> None:
    scores = {"correct": 2.5, "wrong": -1.0, "invalid": 0.25}
    z = np.array([scores[v] for v in VERDICTS])
    want = np.exp(z) / np.exp(z).sum()
    got = verdict_probabilities(scores)
    assert list(got) == list(VERDICTS)
    np.testing.assert_allclose([got[v] for v in VERDICTS], want, rtol=0, atol=1e-15)
    assert defect_probability(got) == pytest.approx(1.0 - want[0], abs=1e-15)
    # Log-probabilities differ from logits by one constant: the same probabilities.
    shifted = verdict_probabilities({v: s - 7.0 for v, s in scores.items()})
    np.testing.assert_allclose(list(shifted.values()), want, atol=1e-15)
    with pytest.raises(ValueError):
        verdict_probabilities({})


def test_the_item_is_shown_with_its_labelled_answer() -> None:
    payload = {"question": "2 + 2 = {x}?", "options": ["3", "4"], "subject": "basic_math"}
    text = render_item("{question}|{options}|{key}|{subject}|{about}", payload, "B")
    # Braces in a question are text, not placeholders.
    assert text == "2 + 2 = {x}?|A. 3\nB. 4|B. 4|basic math| about basic math"
    free = render_item("{question}|{options}|{key}|{about}", {"question": "Capital?"}, "Paris")
    assert free == f"Capital?|{NO_OPTIONS}|Paris|"


def test_parameters_are_checked_when_built() -> None:
    params = CriticParams("mmlu", "smollm2")
    assert params.detector == "critic:smollm2" and params.mode == "generate"
    system, user = params.messages({"question": "Q?", "options": ["x", "y"]}, "A")
    assert system["role"] == "system" and "[Answer key]\nA. x" in user["content"]
    bad: list[tuple[dict[str, Any], str]] = [
        ({"mode": "calibrated"}, "mode"),
        ({"backend": "remote"}, "base_url"),
        ({"backend": "remote", "base_url": "http://x/v1", "mode": "forced"}, "mode"),
        ({"template": "{question} only"}, "template"),
        ({"template": "{question} {key} {answer}"}, "template"),
        ({"limit": 0}, "limit"),
        ({"batch_size": 0}, "batch_size"),
    ]
    for extra, field in bad:
        with pytest.raises(InvalidInput) as caught:
            CriticParams.from_dict({"benchmark": "mmlu", "model": "m", **extra})
        assert caught.value.field == field, extra


def _body(text: str, top: list[tuple[str, float]]) -> dict[str, Any]:
    """A chat-completions body whose last token is the verdict label with ``top`` alternatives."""
    head = [{"token": t, "logprob": -0.1, "top_logprobs": []} for t in ("VERDICT", ":")]
    last = {
        "token": top[0][0],
        "logprob": top[0][1],
        "top_logprobs": [{"token": t, "logprob": v} for t, v in top],
    }
    return {
        "choices": [{"message": {"content": text}, "logprobs": {"content": [*head, last]}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 3},
    }


def test_a_server_reply_is_read_strictly_with_its_label_logprobs() -> None:
    top = [(" wrong", -0.2), (" correct", -1.9), ("wrong", -2.5), (" invalid", -3.0)]
    out = read_critique(7, _body("VERDICT: wrong", top))
    assert (out.verdict, out.error, out.source) == ("wrong", None, "logprobs")
    # Each label's best spelling: " wrong" -0.2 (not "wrong" -2.5), " correct", " invalid".
    z = np.array([-1.9, -0.2, -3.0])
    want = np.exp(z) / np.exp(z).sum()
    assert out.probabilities is not None
    np.testing.assert_allclose([out.probabilities[v] for v in VERDICTS], want, atol=1e-15)
    assert out.score() == pytest.approx(want[1] + want[2], abs=1e-15)
    assert out.missing == () and out.max_error == 0.0
    # A label missing from the alternatives is left out of the softmax, never made up: it is
    # named, and the bound on its effect holds for any mass up to the lowest listed one.
    partial = read_critique(7, _body("VERDICT: wrong", top[:3]))
    assert partial.missing == ("invalid",) and partial.probabilities is not None
    z2 = np.array([-1.9, -0.2])
    np.testing.assert_allclose(
        [partial.probabilities[v] for v in ("correct", "wrong")],
        np.exp(z2) / np.exp(z2).sum(),
        atol=1e-15,
    )
    floor = np.exp(-2.5)  # "wrong" -2.5 is the lowest listed
    for hidden in (0.0, floor / 3, floor):
        p = [*np.exp([-1.9, -0.2]).tolist(), hidden]
        exact = (p[1] + p[2]) / sum(p)
        assert abs(exact - (partial.score() or 0.0)) <= partial.max_error + 1e-15
    assert partial.max_error == pytest.approx(floor / np.exp(z2).sum(), rel=1e-12)
    # A server that returns no log-probabilities: the parsed verdict scores as 0/1.
    bare = read_critique(7, {"choices": [{"message": {"content": "VERDICT: correct"}}]})
    assert bare.probabilities is None and bare.source is None and bare.score() == 0.0
    # Text without a valid verdict: no verdict, no score, whatever the log-probabilities say.
    bad = read_critique(7, _body("VERDICT: Wrong", top))
    assert bad.verdict is None and bad.score() is None and bad.probabilities is None


def test_a_verdict_without_probabilities_scores_by_its_label() -> None:
    def verdict(v: str | None) -> CriticVerdict:
        return CriticVerdict(1, "", v, None if v else "no final", None, None, 0, 0)

    assert [verdict(v).score() for v in ("correct", "wrong", "invalid", None)] == [
        0.0,
        1.0,
        1.0,
        None,
    ]
