"""decide() against numbers worked out by hand."""

import math

import pytest

from diffjev import Schema
from diffjev.decide import SlotRead, aggregate, decide, needs_more_draws, slot_distribution

YES, NO = 11262, 951
A, B, C = 562, 603, 565
OTHER = 9999

SCHEMA = Schema.from_dict(
    {
        "questions": [
            {"id": "urgent", "type": "yes_no", "instructions": "Urgent?"},
            {"id": "team", "type": "choice", "instructions": "Team?", "options": ["billing", "technical", "account"]},
            {"id": "tone", "type": "score", "instructions": "Upset?", "levels": ["calm", "annoyed", "furious"]},
        ]
    }
)
LABELS = {"urgent": (YES, NO), "team": (A, B, C), "tone": (A, B, C)}
ln = math.log


def test_renormalises_over_labels_with_entropy_margin_and_label_mass():
    q = SCHEMA.question("urgent")
    d = slot_distribution(q, LABELS["urgent"], SlotRead({YES: ln(0.6), NO: ln(0.2), OTHER: ln(0.1)}, argmax=YES))
    assert d.probs == pytest.approx((0.75, 0.25))
    assert d.label_mass == pytest.approx(0.8)
    assert d.entropy == pytest.approx(0.5623351446188083)  # -(.75 ln .75 + .25 ln .25)
    assert d.argmax_is_label is True
    a = aggregate(q, [d])
    assert (a.answer, a.confidence, a.margin) == ("yes", pytest.approx(0.75), pytest.approx(0.5))
    assert a.full_vocab_confidence == pytest.approx(0.6)
    assert a.value == pytest.approx(0.75)
    assert a.stderr is None and a.agreement is None and a.draws == 1


def test_a_label_missing_from_the_returned_logprobs_sits_five_nats_below_the_lowest():
    q = SCHEMA.question("team")
    d = slot_distribution(q, LABELS["team"], SlotRead({A: ln(0.5), B: ln(0.1), OTHER: ln(0.3)}, argmax=A))
    floor = 0.1 * math.exp(-5)  # exp(min returned logprob - 5)
    total = 0.5 + 0.1 + floor
    assert d.probs == pytest.approx((0.5 / total, 0.1 / total, floor / total))
    assert d.missing_labels == ("C",)
    assert d.label_mass == pytest.approx(total)


def test_draws_give_mean_stderr_and_agreement():
    q = SCHEMA.question("urgent")
    draws = [slot_distribution(q, LABELS["urgent"], SlotRead({YES: ln(p), NO: ln(1 - p)})) for p in (0.8, 0.6, 0.3)]
    a = aggregate(q, draws)
    assert a.answer == "yes" and a.probabilities["yes"] == pytest.approx(1.7 / 3)
    # sample variance of (0.8, 0.6, 0.3) with n - 1 = 2, then sqrt(s² / n)
    s2 = ((0.8 - 1.7 / 3) ** 2 + (0.6 - 1.7 / 3) ** 2 + (0.3 - 1.7 / 3) ** 2) / 2
    assert a.stderr == pytest.approx(math.sqrt(s2 / 3))
    assert a.stderr == pytest.approx(0.1452966, abs=1e-6)
    assert a.agreement == pytest.approx(2 / 3)
    assert a.draw_entropies[0] == pytest.approx(-(0.8 * ln(0.8) + 0.2 * ln(0.2)))


def test_margin_and_entropy_on_three_labels_and_the_score_value():
    q = SCHEMA.question("tone")
    a = aggregate(q, [slot_distribution(q, LABELS["tone"], SlotRead({A: ln(0.2), B: ln(0.5), C: ln(0.3)}))])
    assert a.answer == "annoyed" and a.margin == pytest.approx(0.2)
    assert a.entropy == pytest.approx(-(0.2 * ln(0.2) + 0.5 * ln(0.5) + 0.3 * ln(0.3)))
    assert a.value == pytest.approx(0 * 0.2 + 1 * 0.5 + 2 * 0.3)


def test_auto_policy_adds_draws_only_when_a_slot_is_unsure():
    sure = {
        "urgent": SlotRead({YES: ln(0.99), NO: ln(0.001)}),
        "team": SlotRead({A: ln(0.98), B: ln(0.001), C: ln(0.001)}),
        "tone": SlotRead({A: ln(0.001), B: ln(0.001), C: ln(0.97)}),
    }
    unsure = dict(sure, tone=SlotRead({A: ln(0.3), B: ln(0.3), C: ln(0.4)}))
    assert needs_more_draws(SCHEMA, sure, LABELS) == 0  # every slot's entropy is under 0.1 nats
    assert needs_more_draws(SCHEMA, unsure, LABELS) == 3  # auto_max 4, one read already made
    fixed = Schema.from_dict({**SCHEMA.to_dict(), "samples": 5})
    assert needs_more_draws(fixed, unsure, LABELS) == 0
    capped = Schema.from_dict({**SCHEMA.to_dict(), "auto_max": 1})
    assert needs_more_draws(capped, unsure, LABELS) == 0


def test_jev_shapes_follow_upstream():
    reads = [
        {
            "urgent": SlotRead({YES: ln(0.6), NO: ln(0.2)}, argmax=OTHER),
            "team": SlotRead({A: ln(0.1), B: ln(0.7), C: ln(0.1)}),
            "tone": SlotRead({A: ln(0.25), B: ln(0.25), C: ln(0.5)}),
        }
    ]
    from diffjev.decide import Decision

    decision = Decision(decide(SCHEMA, reads, LABELS), SCHEMA)
    jev = decision.to_jev()
    assert jev["urgent"] == {
        "type": "noul",
        "noul": pytest.approx(0.75),
        "probabilities": {"yes": pytest.approx(0.75), "no": pytest.approx(0.25)},
        "confidence": pytest.approx(0.6),
    }
    assert jev["team"]["choice"] == "technical" and jev["team"]["confidence"] == pytest.approx(0.7)
    assert set(jev["team"]["probabilities"]) == {"billing", "technical", "account"}
    assert jev["tone"]["legend"] == {"0": "calm", "1": "annoyed", "2": "furious"}
    assert jev["tone"]["score"] == pytest.approx(0.25 + 2 * 0.5)
    assert jev["tone"]["probabilities"] == {"0": pytest.approx(0.25), "1": pytest.approx(0.25), "2": pytest.approx(0.5)}
    assert decision.answers["urgent"].confidence == pytest.approx(0.75)  # the renormalised one is kept too
    assert decision.jev_diagnostics()["urgent"] == {"label_mass": pytest.approx(0.8), "argmax_is_label": False}
