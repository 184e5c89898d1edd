"""The judge protocol: strict parsing, slot-to-identity mapping, template substitution."""

from __future__ import annotations

import pytest

from app.errors import InvalidInput
from app.services.jobs.judge import JudgeParams
from app.services.jobs.judge_protocol import JudgePrompt, identity, parse_output, strip_verdict_tail


@pytest.mark.parametrize(
    ("text", "slot", "confidence"),
    [
        ("Both are fine but A is right.\nCONFIDENCE: 80\nVERDICT: A", "A", 80.0),
        ("CONFIDENCE: 0\nVERDICT: B\n", "B", 0.0),
        ("reason\nCONFIDENCE: 100%\n\nVERDICT:B  ", "B", 100.0),
    ],
)
def test_well_formed_outputs_parse(text: str, slot: str, confidence: float):
    parsed = parse_output(text)
    assert (parsed.valid, parsed.slot, parsed.confidence) == (True, slot, confidence)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("A is better.", "no final"),
        ("CONFIDENCE: 80\nVERDICT: A\nActually B.", "no final"),
        ("CONFIDENCE: 80\nVERDICT: C", "no final"),
        ("VERDICT: A", "no CONFIDENCE"),
        ("CONFIDENCE: 80\nCONFIDENCE: 90\nVERDICT: A", "more than one CONFIDENCE"),
        ("CONFIDENCE: 180\nVERDICT: A", "above 100"),
        ("CONFIDENCE: 80\nVERDICT: B\nVERDICT: A", "more than one VERDICT"),
        ("CONFIDENCE: 80\nVERDICT: AB", "no final"),
    ],
)
def test_malformed_outputs_are_invalid_never_guessed(text: str, reason: str):
    parsed = parse_output(text)
    assert not parsed.valid and reason in (parsed.error or "")
    assert parsed.choice("AB") == "invalid"


def test_slots_map_back_to_identities():
    assert [identity(s, "AB") for s in "AB"] == ["A", "B"]
    assert [identity(s, "AB-repeat") for s in "AB"] == ["A", "B"]
    assert [identity(s, "BA") for s in "AB"] == ["B", "A"]
    assert parse_output("CONFIDENCE: 9\nVERDICT: A").choice("BA") == "B"


def test_messages_show_the_responses_in_order_and_keep_braces():
    prompt = JudgePrompt()
    ab = prompt.messages("Q {x}?", "resp {a}", "resp {b}", "AB")
    ba = prompt.messages("Q {x}?", "resp {a}", "resp {b}", "BA")
    assert [m["role"] for m in ab] == ["system", "user"]
    user_ab, user_ba = ab[1]["content"], ba[1]["content"]
    assert user_ab.index("resp {a}") < user_ab.index("resp {b}")
    assert user_ba.index("resp {b}") < user_ba.index("resp {a}")
    assert "Q {x}?" in user_ab and "{first}" not in user_ab


def test_templates_must_name_every_placeholder():
    with pytest.raises(InvalidInput, match="template"):
        JudgePrompt(template="{prompt} {first}")
    with pytest.raises(InvalidInput, match="orders"):
        JudgeParams(benchmark="b", model="m", orders=["AB", "CA"])
    with pytest.raises(InvalidInput, match="base_url"):
        JudgeParams(benchmark="b", model="m", backend="remote")
    assert JudgeParams(benchmark="b", model="m", mode="forced").judge == "m/forced"


def test_forced_mode_keeps_only_the_reasoning():
    assert strip_verdict_tail("thinking\nVERDICT: A") == "thinking\n"
    assert strip_verdict_tail("no verdict") == "no verdict"
