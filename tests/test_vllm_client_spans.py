"""Span reads through the engines: the vLLM client's multi-step request (wire shapes), the stand-in
server honouring steps and pinned positions, and the in-process engine giving the same answer."""

from __future__ import annotations

import httpx
import pytest
from conftest import SERVED_NAME

from diffjev import Schema, SpanAnswer
from diffjev.engines.vllm import VLLMServerEngine
from diffjev.spans import DEFAULT_SPAN_STEPS, MAX_ITEM_IDS

SCHEMA = Schema.from_dict(
    {
        "questions": [
            {"id": "urgent", "type": "yes_no", "instructions": "Is it urgent?"},
            {"id": "product", "type": "span", "instructions": "Which product?", "max_tokens": 8},
            {"id": "things", "type": "spans", "instructions": "Which things are named?", "max_items": 2},
        ]
    }
)
TEXT = "The Blue Kettle 🫖 arrived broken.\r\nCafe\u0301 staff said to write here."


@pytest.fixture(scope="module")
def vllm_engine(vllm_server, tokenizer):
    engine = VLLMServerEngine(vllm_server.url, SERVED_NAME, tokenizer, canvas_length=64)
    yield engine
    engine.close()


def test_span_request_is_multi_step_pinned_and_restricted_to_the_items_ids(vllm_engine, tokenizer):
    question = SCHEMA.question("product")
    builder = vllm_engine.span_builder
    from diffjev.spans import tokenize_text

    window = tokenize_text(tokenizer, TEXT)
    canvas = builder.build(question, window, seed=7)
    body = vllm_engine.span_request_body(canvas)
    xargs = body["vllm_xargs"]
    assert xargs["diffusion_max_steps"] == DEFAULT_SPAN_STEPS > 1
    assert xargs["diffusion_read_only"] is True
    assert xargs["diffusion_seed_canvas"] == list(canvas.ids) and xargs["diffusion_canvas_length"] == canvas.width
    blank = list(canvas.blank)
    assert len(blank) == 8  # the question's max_tokens
    assert sorted(xargs["diffusion_pinned"] + blank) == list(range(canvas.width))  # all but the blank
    assert set(window.ids) <= set(body["logprob_token_ids"]) and len(body["logprob_token_ids"]) <= MAX_ITEM_IDS
    assert body["logprob_token_ids"] == sorted(body["logprob_token_ids"])
    assert body["logprobs"] is True and body["return_tokens_as_token_ids"] is True
    assert "seed" not in body and "temperature" not in body
    assert body["max_tokens"] == canvas.reply_tokens


def test_stand_in_server_denoises_only_what_is_not_pinned(vllm_server, vllm_engine, tokenizer):
    from diffjev.spans import tokenize_text

    canvas = vllm_engine.span_builder.build(SCHEMA.question("product"), tokenize_text(tokenizer, TEXT), seed=3)
    body = vllm_engine.span_request_body(canvas)

    def read(**xargs):
        sent = {**body, "vllm_xargs": {**body["vllm_xargs"], **xargs}}
        response = httpx.post(f"{vllm_server.url}/v1/chat/completions", json=sent, timeout=60)
        assert response.status_code == 200, response.text
        return response.json()["choices"][0]["logprobs"]["content"]

    one, four = read(diffusion_max_steps=1), read()
    # A pinned position reads its seed token; four steps change what the blank reads, not the head.
    blank_changed = any(one[p]["top_logprobs"] != four[p]["top_logprobs"] for p in canvas.blank)
    assert blank_changed
    free = read(diffusion_pinned=[])  # nothing pinned: the head may be rewritten too
    assert any(free[p]["top_logprobs"] != four[p]["top_logprobs"] for p in canvas.pinned[: canvas.reply_tokens])


def test_generation_is_still_refused_by_the_stand_in(vllm_server, vllm_engine, tokenizer):
    from diffjev.spans import tokenize_text

    canvas = vllm_engine.span_builder.build(SCHEMA.question("product"), tokenize_text(tokenizer, TEXT), seed=3)
    body = vllm_engine.span_request_body(canvas)
    body["vllm_xargs"]["diffusion_read_only"] = False
    response = httpx.post(f"{vllm_server.url}/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 400 and "read-only" in response.json()["error"]["message"]


def test_vllm_and_transformers_read_the_same_spans(vllm_engine, dgemma_engine):
    over_http = next(vllm_engine.decide_many(SCHEMA, [TEXT]))
    in_process = next(dgemma_engine.decide_many(SCHEMA, [TEXT]))
    for qid in ("product", "things"):
        a, b = over_http.answers[qid], in_process.answers[qid]
        assert isinstance(a, SpanAnswer) and a.answer == b.answer and a.reads == b.reads
        assert a.confidence == pytest.approx(b.confidence, abs=1e-4)
        for span in a.spans:
            assert TEXT[span.start : span.end] == span.text
    assert list(over_http.answers) == ["urgent", "product", "things"]
    jev = over_http.to_jev()
    assert jev["product"]["type"] == "span" and set(jev["product"]) >= {
        "found",
        "text",
        "start",
        "end",
        "confidence",
        "coverage",
        "reads",
    }
    assert jev["things"]["type"] == "spans" and len(jev["things"]["items"]) <= 2


def test_a_span_only_schema_reads_no_label_canvas(dgemma_engine):
    only = Schema.from_dict({"questions": [{"id": "product", "type": "span", "instructions": "Which product?"}]})
    decision = next(dgemma_engine.decide_many(only, [TEXT]))
    assert list(decision.answers) == ["product"]
    span = decision.answers["product"].spans
    assert all(TEXT[s.start : s.end] == s.text for s in span)
    assert decision.diagnostics["model_passes"] == decision.answers["product"].reads * DEFAULT_SPAN_STEPS


def test_jev_api_serves_and_reads_span_answers_in_vllms_shapes(dgemma_engine):
    from conftest import LocalServer
    from fastapi import FastAPI

    from diffjev.api import jev_router
    from diffjev.engines.jev_api import JevAPIEngine

    app = FastAPI()
    app.include_router(jev_router(lambda: dgemma_engine))
    only = Schema.from_dict(
        {
            "questions": [
                {"id": "product", "type": "span", "instructions": "Which product?"},
                {"id": "things", "type": "spans", "instructions": "Which things?"},
            ]
        }
    )
    with LocalServer(app) as server:
        body = {"state": TEXT, "questions": only.to_jev_questions()}
        served = httpx.post(f"{server.url}/v1/systemone", json=body, timeout=60).json()
        product = served["answers"]["product"]
        assert product["type"] == "span" and "reads" in product
        if product["found"]:
            assert TEXT[product["start"] : product["end"]] == product["text"]
        assert served["answers"]["things"]["type"] == "spans"
        client = JevAPIEngine(server.url)
        try:
            decision = next(client.decide_many(only, [TEXT]))
        finally:
            client.close()
    local = next(dgemma_engine.decide_many(only, [TEXT]))
    assert decision.answers["product"].answer == local.answers["product"].answer
    assert decision.answers["things"].answer == local.answers["things"].answer


def test_a_batch_of_items_reads_their_span_questions_concurrently(vllm_engine, monkeypatch):
    # A server takes many reads at once: the items of a chunk must not wait for each other's span reads.
    import threading
    import time

    from diffjev import read_many

    lock, state = threading.Lock(), {"now": 0, "most": 0}
    real = vllm_engine._read_blank

    def counted(canvas):
        with lock:
            state["now"] += 1
            state["most"] = max(state["most"], state["now"])
        try:
            time.sleep(0.05)  # long enough for reads sent at once to overlap
            return real(canvas)
        finally:
            with lock:
                state["now"] -= 1

    monkeypatch.setattr(vllm_engine, "_read_blank", counted)
    only = Schema.from_dict(
        {"questions": [{"id": "product", "type": "span", "instructions": "Which?", "max_tokens": 4}]}
    )
    texts = [f"Order {n}: the Blue Kettle arrived." for n in range(8)]
    decisions = list(read_many(only, texts, vllm_engine))
    assert [d.answers["product"].question_id for d in decisions] == ["product"] * 8
    assert state["most"] >= 4  # more than the two chunks the pipeline reads at once
