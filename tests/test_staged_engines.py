"""Every engine reads a staged schema the same way: a question whose `ask_if` the earlier answers do not
meet is not read, is absent from the answers, and is listed in `diagnostics["skipped"]`; the model
passes count the reads that were made."""

import pytest

from diffjev import Schema
from diffjev.engines import AutoregressiveEngine
from diffjev.read import read
from diffjev.staging import skips
from conftest import STATES

QUESTIONS = [
    {"id": "urgent", "type": "yes_no", "instructions": "Does the customer need a reply within the hour?"},
    {"id": "team", "type": "choice", "instructions": "Which team?", "options": ["billing", "technical"]},
    {"id": "outage", "type": "yes_no", "instructions": "Is it an outage?", "ask_if": {"urgent": "yes"}},
    {"id": "calm", "type": "yes_no", "instructions": "Is the customer calm?", "ask_if": {"urgent": "no"}},
]
SCHEMA = Schema.from_dict({"questions": QUESTIONS, "samples": 1})


# Model passes of one item's read (two stages; the second reads one question): a canvas per read group,
# a pass per slot read for the sequential mode, the shared prompt and one pass per group for options.
PASSES = {"transformers": 2, "single": 2, "sequential": 3, "options": 4}


@pytest.fixture(params=list(PASSES))
def engine(request, dgemma_engine, causal_lm, tokenizer):
    if request.param == "transformers":
        return dgemma_engine, PASSES["transformers"]
    return AutoregressiveEngine(causal_lm, tokenizer, mode=request.param), PASSES[request.param]


def test_a_question_whose_condition_fails_is_not_read_by_any_engine(engine):
    engine, passes = engine
    for state in STATES:
        decision = read(SCHEMA, state, engine)
        urgent = decision.answers["urgent"].answer
        asked, dropped = ("outage", "calm") if urgent == "yes" else ("calm", "outage")
        assert asked in decision.answers and dropped not in decision.answers
        assert decision.diagnostics["skipped"] == {
            dropped: {"because": "urgent", "was": urgent, "wanted": ["no" if urgent == "yes" else "yes"]}
        }
        assert decision.diagnostics["skipped"] == skips(SCHEMA.questions, {"urgent": urgent})
        assert decision.to_jev()[dropped] is None
        assert decision.diagnostics["model_passes"] == passes


def test_the_options_read_restates_earlier_answers_and_counts_only_the_reads_made(causal_lm, tokenizer):
    engine = AutoregressiveEngine(causal_lm, tokenizer, mode="options")
    prompts = []
    original = engine.read_options

    def spy(tokens):
        prompts.append({qid: tokenizer.decode(ids) for qid, ids in tokens.prompts.items()})
        return original(tokens)

    engine.read_options = spy
    decision = read(SCHEMA, STATES[0], engine)
    item_reads = prompts[len(prompts) - 2 :]  # the prior's content-free reads come first, once
    first, second = item_reads
    assert set(first) == {"urgent", "team"}
    urgent = decision.answers["urgent"].answer
    (asked,) = second
    assert asked == ("outage" if urgent == "yes" else "calm")
    # A later question is asked knowing the earlier answers: restated in its prompt.
    assert f"urgent: {urgent}" in second[asked] and f"team: {decision.answers['team'].answer}" in second[asked]
    assert "urgent: " not in first["urgent"]
    # Two read groups, each the item's shared prompt then one pass over its questions and options.
    assert decision.diagnostics["model_passes"] == 4 == 2 * len(item_reads)
    assert decision.diagnostics["stages"] == [
        {"questions": ["urgent", "team"], "restated": []},
        {"questions": [asked], "restated": ["urgent", "team"]},
    ]


def test_an_options_read_of_a_schema_without_stages_is_one_read(causal_lm, tokenizer, schema):
    engine = AutoregressiveEngine(causal_lm, tokenizer, mode="options")
    decision = read(schema, STATES[1], engine)
    assert set(decision.answers) == {q.id for q in schema.questions}
    assert decision.diagnostics["model_passes"] == 2 and "skipped" not in decision.diagnostics
