"""In-process engines on tiny random-weight models of each family, checked against the models' own full
forward passes, plus the read pipeline (order, diagnostics, sampling policy) and the offline fallback."""

import dataclasses
import time

import pytest
import torch

from diffjev import EngineError, Schema, read, read_many
from diffjev.engines import AutoregressiveEngine, TransformersEngine
from diffjev.models import ModelLoadError, load_tokenizer
from conftest import STATES, TICKETS


def assert_matches_full_forward(engine, canvas, full, offset=0):
    """Every label's logprob at every slot equals the full forward's, row `slot + offset`."""
    got = engine.read([canvas])[0]
    for qid, pos in canvas.slots.items():
        for tid, lp in got[qid].logprobs.items():
            assert lp == pytest.approx(full[pos + offset, tid].item(), abs=1e-5)
        assert got[qid].argmax == int(full[pos + offset].argmax())


LONG_TEMPLATE = (
    "Is a reply needed within the hour? {urgent}. The team that should take this ticket is: {team}. "
    "On a scale from zero to two, the customer is upset at level {tone}."
)


@pytest.mark.parametrize("template", [None, LONG_TEMPLATE])
def test_diffusion_gemma_read_equals_its_full_forward(dgemma_engine, template):
    schema = Schema.from_dict({**TICKETS, **({"template": template} if template else {})})
    canvas = dgemma_engine.builder.build(schema, STATES[0], seed=42)
    assert canvas.width == (16 if template is None else 48)
    assert_matches_full_forward(dgemma_engine, canvas, dgemma_engine.canvas_logprobs(canvas.prompt_ids, canvas.ids))


def test_masked_lm_read_equals_its_full_forward(masked_lm, tokenizer, schema):
    engine = TransformersEngine(masked_lm, tokenizer)
    assert engine.family == "masked"
    canvas = engine.builder.build(schema, STATES[1], seed=42)
    assert {canvas.ids[p] for p in canvas.slots.values()} == {tokenizer.mask_token_id}
    assert_matches_full_forward(engine, canvas, engine.canvas_logprobs(canvas.prompt_ids, canvas.ids))


def test_batched_reads_equal_one_at_a_time(dgemma_engine, schema):
    canvases = [dgemma_engine.builder.build(schema, STATES[0], seed=s) for s in (1, 2, 3, 4, 5)]
    batched = dgemma_engine.read(canvases)
    for canvas, got in zip(canvases, batched):
        alone = dgemma_engine.read([canvas])[0]
        for qid in canvas.slots:
            assert got[qid].logprobs == pytest.approx(alone[qid].logprobs, abs=1e-5)


@torch.inference_mode()
def causal_logprobs(model, ids):
    return torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)


def test_autoregressive_single_scores_each_slot_from_its_left_context(causal_lm, tokenizer, schema):
    engine = AutoregressiveEngine(causal_lm, tokenizer, mode="single")
    canvas = engine.builder.build(schema, STATES[0], seed=42)
    full = causal_logprobs(causal_lm, list(canvas.prompt_ids) + list(canvas.ids))
    assert_matches_full_forward(engine, canvas, full, offset=len(canvas.prompt_ids) - 1)


def test_autoregressive_sequential_fills_earlier_slots_with_their_answer(causal_lm, tokenizer, schema):
    single = AutoregressiveEngine(causal_lm, tokenizer, mode="single")
    sequential = AutoregressiveEngine(causal_lm, tokenizer, mode="sequential")
    canvas = single.builder.build(schema, STATES[0], seed=42)
    seq = sequential.read([canvas])[0]
    # The first slot has nothing before it to fill: both modes agree there.
    assert seq["urgent"].logprobs == pytest.approx(single.read([canvas])[0]["urgent"].logprobs, abs=1e-5)
    # Each later slot equals a single pass over the canvas with every earlier slot set to its top label.
    ids = list(canvas.ids)
    for qid, pos in sorted(canvas.slots.items(), key=lambda kv: kv[1]):
        full = causal_logprobs(causal_lm, list(canvas.prompt_ids) + ids)
        row = full[len(canvas.prompt_ids) + pos - 1]
        for tid, lp in seq[qid].logprobs.items():
            assert lp == pytest.approx(row[tid].item(), abs=1e-4)
        ids[pos] = max(canvas.label_ids[qid], key=lambda t: row[t].item())


def count_calls(module):
    calls = []
    handle = module.register_forward_hook(lambda *a: calls.append(1))
    return calls, handle


def test_model_passes_per_read(dgemma_engine, causal_lm, tokenizer, schema):
    one = dataclasses.replace(schema, sampling=dataclasses.replace(schema.sampling, samples=1))
    calls, handle = count_calls(dgemma_engine.model.model)
    read(one, STATES[0], dgemma_engine)
    handle.remove()
    assert len(calls) == 1  # one joint read answers all three questions
    sequential = AutoregressiveEngine(causal_lm, tokenizer, mode="sequential")
    calls, handle = count_calls(causal_lm.model)
    read(one, STATES[0], sequential)
    handle.remove()
    assert len(calls) == 3  # one pass per slot
    # and each read reports what it cost, for the model comparison
    assert read(one, STATES[0], sequential).diagnostics["model_passes"] == 3
    assert read(one, STATES[0], dgemma_engine).diagnostics["model_passes"] == 1


def test_read_many_keeps_order_and_records_diagnostics(dgemma_engine, schema):
    dgemma_engine.batch_size = 2  # several chunks, pipelined
    try:
        many = list(read_many(schema, STATES * 2, dgemma_engine))
    finally:
        dgemma_engine.batch_size = 8
    assert len(many) == 6
    for state, decision in zip(STATES * 2, many):
        alone = read(schema, state, dgemma_engine)
        for qid, answer in alone.answers.items():
            assert decision.answers[qid].probabilities == pytest.approx(answer.probabilities, abs=1e-6)
    d = many[0].diagnostics
    assert (
        d["engine"] == "transformers"
        and d["prompt_ids"]
        and d["canvas_ids"][d["slots"]["team"]] not in d["label_ids"]["team"]
    )
    assert set(d["slots"]) == {"urgent", "team", "tone"} and len(d["label_ids"]["team"]) == 3
    assert d["timing"]["read_s"] > 0


def test_sampling_policy_sets_the_number_of_draws(dgemma_engine, masked_lm, tokenizer):
    # A random-weight model is unsure everywhere (entropy near ln 3), so "auto" takes its maximum.
    auto = Schema.from_dict({**TICKETS, "auto_max": 4})
    d = read(auto, STATES[0], dgemma_engine)
    assert d.diagnostics["draws"] == 4 and d.diagnostics["seeds"] == [42, 42 + 7919, 42 + 2 * 7919, 42 + 3 * 7919]
    assert d.answers["team"].draws == 4 and d.answers["team"].stderr is not None
    lenient = Schema.from_dict({**TICKETS, "auto_threshold": 5.0})
    assert read(lenient, STATES[0], dgemma_engine).diagnostics["draws"] == 1
    fixed = Schema.from_dict({**TICKETS, "samples": 3})
    assert read(fixed, STATES[0], dgemma_engine, seed=5).diagnostics["seeds"] == [5, 5 + 7919, 5 + 2 * 7919]
    # Mask noise is the same every draw, so a masked model reads once whatever the policy.
    assert read(fixed, STATES[0], TransformersEngine(masked_lm, tokenizer)).diagnostics["draws"] == 1


def test_engines_refuse_the_wrong_model_family(causal_lm, tokenizer):
    with pytest.raises(EngineError, match="AutoregressiveEngine"):
        TransformersEngine(causal_lm, tokenizer)
    with pytest.raises(EngineError, match="mode"):
        AutoregressiveEngine(causal_lm, tokenizer, mode="beam")


def test_a_hub_name_fails_fast_without_network():
    started = time.monotonic()
    with pytest.raises(ModelLoadError) as err:
        load_tokenizer("google/diffusiongemma-26B-A4B-it")
    assert time.monotonic() - started < 15
    assert "not a local folder" in str(err.value) and "google/diffusiongemma-26B-A4B-it" in str(err.value)


def test_offline_fallback_reads_with_the_real_gemma_270m(schema):
    engine = AutoregressiveEngine.offline()
    assert type(engine.model).__name__ == "Gemma3ForCausalLM"
    assert sum(p.numel() for p in engine.model.parameters()) > 200_000_000
    one = Schema.from_dict({**TICKETS, "samples": 1})
    d = read(one, "Everything is down and we have a demo at noon.", engine)
    assert d.diagnostics["model"].startswith("gemma3-270m")
    for answer in d.answers.values():
        assert sum(answer.probabilities.values()) == pytest.approx(1.0)
        assert 0 < answer.label_mass <= 1


def test_the_autoregressive_engine_passes_its_cache_as_the_installed_transformers_names_it(
    causal_lm, tokenizer, schema
):
    """transformers renamed `past_key_values` to `cache` and warns at every call that passes the old name:
    a pre-labeling run printed one FutureWarning per read."""
    import warnings

    one = dataclasses.replace(schema, sampling=dataclasses.replace(schema.sampling, samples=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for mode in ("sequential", "options"):
            read(one, STATES[0], AutoregressiveEngine(causal_lm, tokenizer, mode=mode))
