"""The autoregressive baseline for span questions: every candidate substring scored as the answer."""

from __future__ import annotations

import types

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diffjev import Schema, read_many
from diffjev.engines import AutoregressiveEngine
from diffjev.spans import SpanAnswer
from diffjev.engines.autoregressive import chosen_spans, joins_previous, span_boundaries


def question(kind: str = "span", max_tokens: int | None = 4, max_items: int | None = None, qid: str = "who"):
    return types.SimpleNamespace(
        id=qid, kind=kind, instructions="Which words name a person?", max_tokens=max_tokens, max_items=max_items
    )


@pytest.fixture(scope="module")
def engine(causal_lm, tokenizer):
    # batch_size 2: rows of unequal length share a batch (padded) and several batches share the prefix cache
    return AutoregressiveEngine(causal_lm, tokenizer, mode="options", instruction_tuned=False, batch_size=2)


def test_span_boundaries_keep_combining_marks_emoji_modifiers_and_joined_emoji_whole():
    text = "cafe\u0301 👍🏽 👩\u200d👧 a\r\nb"
    starts, ends = span_boundaries(text)
    assert 4 not in ends and 5 in ends  # never between "e" and its accent
    thumb = text.index("👍")
    assert thumb + 1 not in ends and thumb + 2 in ends  # never between the thumb and its skin tone
    family = text.index("👩")
    assert family + 1 not in ends and family + 2 not in starts and family + 3 in ends
    assert text.index(" a") + 2 in ends and text.index("b") in starts and len(text) in ends


def test_each_candidates_score_is_the_models_own_logprob_of_writing_it_and_ending_there(engine, causal_lm):
    prompt = engine.tokenizer("Text:\nI met Ada Lovelace.\n\nAnswer:")["input_ids"]
    rows = [[5, 6, 7], [8], [9, 10, 11, 12, 13]]
    end_id = 107
    scores = engine.span_row_logprobs(prompt, rows, end_id)
    with torch.inference_mode():
        for ids, row in zip(rows, scores):
            for k in range(len(ids)):
                whole = prompt + ids[: k + 1] + [end_id]
                logprobs = torch.log_softmax(causal_lm(input_ids=torch.tensor([whole])).logits[0].float(), -1)
                written = [logprobs[len(prompt) - 1 + t, tok] for t, tok in enumerate(ids[: k + 1] + [end_id])]
                assert row[k] == pytest.approx(float(sum(written)), abs=1e-3)


TEXT = st.text(
    alphabet=st.sampled_from(list("ab Zé.,\r\n") + ["\u0301", "👍", "🏽", "\u200d", "👩", "日", "本", "\t"]),
    min_size=1,
    max_size=16,
)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXT, kind=st.sampled_from(["span", "spans"]))
def test_every_answer_is_an_exact_substring_at_its_offsets_over_any_text(engine, text, kind):
    answer = engine.read_span(question(kind, max_tokens=3, max_items=2), text)
    assert answer.kind == kind and answer.reads == 1 and 0 <= answer.confidence <= 1
    assert len(answer.spans) <= (1 if kind == "span" else 2)
    for span in answer.spans:
        assert text[span.start : span.end] == span.text and span.text.strip()
        assert span.end == len(text) or not joins_previous(text[span.end])
    for left, right in zip(answer.spans, answer.spans[1:]):
        assert left.end <= right.start
    assert answer.answer == (",".join(f"{s.start}-{s.end}" for s in answer.spans) or "none")


def test_none_wins_when_the_model_rates_it_above_every_candidate():
    spans, confidence, facts = chosen_spans("span", "Ada met Bob", {(0, 3): -5.0, (8, 11): -6.0}, -1.0, None)
    assert spans == () and confidence > 0.9 and facts["candidates"] == 2


def test_a_span_question_takes_the_top_candidate_with_its_renormalised_probability():
    spans, confidence, _ = chosen_spans("span", "Ada met Bob", {(0, 3): -1.0, (8, 11): -2.0}, -3.0, None)
    total = sum(torch.tensor([-1.0, -2.0, -3.0]).exp().tolist())
    assert [(s.start, s.end, s.text) for s in spans] == [(0, 3, "Ada")]
    assert confidence == pytest.approx(torch.tensor(-1.0).exp().item() / total)


def test_a_spans_question_takes_non_overlapping_candidates_rated_above_none_in_text_order():
    text = "Ada met Bob and Cy"
    scored = {(8, 11): -1.0, (0, 3): -1.5, (0, 7): -1.2, (16, 18): -4.0}  # "Ada met" overlaps "Ada"
    spans, _, _ = chosen_spans("spans", text, scored, -3.0, None)
    assert [s.text for s in spans] == ["Ada met", "Bob"]  # Cy is less likely than none
    limited, _, _ = chosen_spans("spans", text, scored, -3.0, 1)
    assert [s.text for s in limited] == ["Bob"]


def test_the_offline_gemma_finds_the_person_a_sentence_names():
    engine = AutoregressiveEngine.offline(batch_size=32)
    text = "I met Barack Obama in Paris last week ."
    answer = engine.read_span(question(max_tokens=8), text)
    assert [(s.start, s.end, s.text) for s in answer.spans] == [(6, 18, "Barack Obama")]
    assert answer.diagnostics["model_passes"] == 2 and answer.diagnostics["candidates"] > 20


@pytest.mark.parametrize("mode", ["options", "single"])
def test_a_schema_with_label_and_span_questions_reads_through_the_autoregressive_engine(causal_lm, tokenizer, mode):
    schema = Schema.from_dict(
        {
            "questions": [
                {"id": "urgent", "type": "yes_no", "instructions": "Is it urgent?"},
                {"id": "who", "type": "span", "instructions": "Who writes?", "max_tokens": 3},
            ],
            "samples": 1,
        }
    )
    engine = AutoregressiveEngine(causal_lm, tokenizer, mode=mode, instruction_tuned=False)
    text = "Ada here: the site is down ."
    (decision,) = read_many(schema, [text], engine)
    assert list(decision.answers) == ["urgent", "who"]
    span = decision.answers["who"]
    assert isinstance(span, SpanAnswer) and span.diagnostics["candidates"] > 0
    assert all(text[s.start : s.end] == s.text for s in span.spans)
    label_passes = engine.passes_per_canvas(schema.slot_part())
    assert decision.diagnostics["model_passes"] == label_passes + span.diagnostics["model_passes"]


def test_a_span_question_whose_condition_fails_is_skipped_not_read(causal_lm, tokenizer):
    schema = Schema.from_dict(
        {
            "questions": [
                {"id": "urgent", "type": "yes_no", "instructions": "Is it urgent?"},
                {
                    "id": "who",
                    "type": "span",
                    "instructions": "Who writes?",
                    "max_tokens": 2,
                    "ask_if": {"urgent": "no"},
                },
                {
                    "id": "what",
                    "type": "span",
                    "instructions": "What broke?",
                    "max_tokens": 2,
                    "ask_if": {"urgent": "yes"},
                },
            ],
            "samples": 1,
        }
    )
    engine = AutoregressiveEngine(causal_lm, tokenizer, mode="options", instruction_tuned=False)
    (decision,) = read_many(schema, ["Ada here: the site is down ."], engine)
    urgent = decision.answers["urgent"].answer
    read, skipped = ("what", "who") if urgent == "yes" else ("who", "what")
    assert read in decision.answers and skipped not in decision.answers
    assert decision.diagnostics["skipped"][skipped]["because"] == "urgent"
