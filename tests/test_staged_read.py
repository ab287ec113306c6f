"""The staged read through the tiny DiffusionGemma: stage by stage, earlier answers prefilled in their
slots, alone questions on their own canvas, and a question whose ask_if fails not read at all."""

import math

import pytest

from diffjev import Schema
from diffjev.read import read
from conftest import STATES

QUESTIONS = [
    {"id": "urgent", "type": "yes_no", "instructions": "Does the customer need a reply within the hour?"},
    {"id": "team", "type": "choice", "instructions": "Which team?", "options": ["billing", "technical"]},
    {"id": "outage", "type": "yes_no", "instructions": "Is it an outage?", "ask_if": {"urgent": "yes"}},
    {"id": "calm", "type": "yes_no", "instructions": "Is the customer calm?", "ask_if": {"urgent": "no"}},
]


def staged(*extra, samples=1):
    return Schema.from_dict({"questions": QUESTIONS + list(extra), "samples": samples})


@pytest.fixture
def seen(dgemma_engine, monkeypatch):
    """Every canvas the engine is asked to read, in order."""
    canvases = []
    original = dgemma_engine.read

    def spy(batch):
        canvases.extend(batch)
        return original(batch)

    monkeypatch.setattr(dgemma_engine, "read", spy)
    return canvases


def test_later_stage_reads_with_earlier_answers_in_their_slots(dgemma_engine, seen):
    schema = staged()
    decision = read(schema, STATES[0], dgemma_engine)
    first, second = seen
    assert set(first.slots) == {"urgent", "team"}
    layout = dgemma_engine.builder.layout(schema)
    urgent = decision.answers["urgent"].answer
    asked, skipped = ("outage", "calm") if urgent == "yes" else ("calm", "outage")
    assert set(second.slots) == {asked}
    # The earlier answers' label tokens sit in their slots, pinned: only the asked slot is read.
    for qid in ("urgent", "team"):
        answer = decision.answers[qid].answer
        token = layout.label_ids[qid][schema.question(qid).names.index(answer)]
        assert second.ids[layout.slots[qid]] == token
        assert layout.slots[qid] in second.pinned
    assert layout.slots[asked] not in second.pinned
    # Every prompt lists all the questions.
    assert first.prompt_ids == second.prompt_ids and "Question calm:" in second.messages[0]["content"]
    # The question whose condition failed is not read, and says why.
    assert skipped not in decision.answers and asked in decision.answers
    assert decision.diagnostics["skipped"] == {
        skipped: {"because": "urgent", "was": urgent, "wanted": ["no" if urgent == "yes" else "yes"]}
    }
    assert decision.diagnostics["model_passes"] == 2
    assert decision.diagnostics["stages"][1] == {"questions": [asked], "prefilled": ["urgent", "team"]}
    assert decision.to_jev()[skipped] is None and decision.to_jev()[asked]["type"] == "noul"
    assert list(decision.to_jev()) == ["urgent", "team", "outage", "calm"]


def test_stage_answer_equals_a_read_of_its_prefilled_canvas(dgemma_engine, seen):
    schema = staged()
    decision = read(schema, STATES[1], dgemma_engine)
    second = seen[1]
    (asked,) = second.slots
    direct = dgemma_engine.read([second])[0][asked]
    layout = dgemma_engine.builder.layout(schema)
    yes = direct.logprobs[layout.label_ids[asked][0]]
    no = direct.logprobs[layout.label_ids[asked][1]]
    assert decision.answers[asked].probabilities["yes"] == pytest.approx(1 / (1 + math.exp(no - yes)))


def test_alone_question_takes_its_own_canvas_in_its_stage(dgemma_engine, seen):
    schema = Schema.from_dict(
        {
            "questions": [
                QUESTIONS[0],
                {**QUESTIONS[1], "alone": True},
                {"id": "spam", "type": "yes_no", "instructions": "Is it spam?"},
            ],
            "samples": 1,
        }
    )
    decision = read(schema, STATES[2], dgemma_engine)
    assert [set(c.slots) for c in seen] == [{"urgent", "spam"}, {"team"}]
    # Nothing was answered before stage one: the alone read has no prefill, only noise in the others' slots.
    assert decision.diagnostics["stages"][1] == {"questions": ["team"], "prefilled": []}
    assert decision.diagnostics["model_passes"] == 2 == dgemma_engine.passes_per_read(schema)
    assert set(decision.answers) == {"urgent", "team", "spam"} and decision.diagnostics["skipped"] == {}


def test_a_batch_reads_each_item_on_its_own_conditions(dgemma_engine):
    schema = staged()
    decisions = list(dgemma_engine.decide_many(schema, STATES))
    one_by_one = [read(schema, state, dgemma_engine) for state in STATES]
    for batched, alone in zip(decisions, one_by_one):
        assert set(batched.answers) == set(alone.answers)
        assert batched.diagnostics["skipped"] == alone.diagnostics["skipped"]
        for qid, answer in batched.answers.items():
            assert answer.probabilities == pytest.approx(alone.answers[qid].probabilities, abs=1e-5)
