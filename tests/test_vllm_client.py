"""VLLMServerEngine over real HTTP against a server that speaks vLLM's wire format and computes with the
tiny DiffusionGemma; the server's request validation; and each way a server can fail."""

import json
import time

import httpx
import pytest

from diffjev import EngineError, Schema, read, read_many
from diffjev.engines import VLLMServerEngine
from conftest import SERVED_NAME, STATES, TICKETS, LocalServer
from faulty_servers import CannedFault, Silent, closed_port_url


@pytest.fixture(scope="module")
def client(vllm_server, tokenizer):
    engine = VLLMServerEngine(vllm_server.url, model=SERVED_NAME, tokenizer=tokenizer, max_in_flight=4)
    yield engine
    engine.close()


def test_same_distributions_over_http_as_in_process(client, dgemma_engine, schema):
    custom = Schema.from_dict({**TICKETS, "template": "Urgent: {urgent}\nTeam: {team}\nTone: {tone}/3"})
    for s in (schema, custom):
        remote = list(read_many(s, STATES, client))
        for state, got in zip(STATES, remote):
            local = read(s, state, dgemma_engine)
            assert got.diagnostics["draws"] == local.diagnostics["draws"]
            assert got.diagnostics["canvas_ids"] == local.diagnostics["canvas_ids"]
            assert got.diagnostics["prompt_ids"] == local.diagnostics["prompt_ids"]
            for qid, answer in local.answers.items():
                other = got.answers[qid]
                assert other.answer == answer.answer
                for name, p in answer.probabilities.items():
                    assert other.probabilities[name] == pytest.approx(p, abs=1e-5)
                assert other.label_mass == pytest.approx(answer.label_mass, rel=1e-4)
                assert other.argmax_is_label == answer.argmax_is_label


def test_request_carries_the_structured_read_fields_and_never_temperature_or_seed(client, schema):
    canvas = client.builder.build(schema, STATES[0], seed=42)
    body = client.request_body(canvas)
    assert "temperature" not in body and "seed" not in body
    assert body["vllm_xargs"] == {
        "diffusion_seed_canvas": list(canvas.ids),
        "diffusion_canvas_length": canvas.width,
        "diffusion_max_steps": 1,
        "diffusion_read_only": True,
    }
    assert body["logprob_token_ids"] == sorted({t for ids in canvas.label_ids.values() for t in ids})
    assert body["logprobs"] is True and body["top_logprobs"] == 20 and body["return_tokens_as_token_ids"] is True


def post(server, **changes):
    body = {
        "model": SERVED_NAME,
        "messages": [{"role": "user", "content": "hi"}],
        "logprobs": True,
        "top_logprobs": 5,
        "return_tokens_as_token_ids": True,
        "vllm_xargs": {
            "diffusion_seed_canvas": [7] * 16,
            "diffusion_canvas_length": 16,
            "diffusion_max_steps": 1,
            "diffusion_read_only": True,
        },
    }
    for key, value in changes.items():
        if key.startswith("x_"):
            body["vllm_xargs"][key[2:]] = value
        elif value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=30)


@pytest.mark.parametrize(
    "changes, status, says",
    [
        ({"x_diffusion_seed_canvas": [7] * 15}, 400, "diffusion_seed_canvas"),
        ({"x_diffusion_seed_canvas": [7] * 15 + [10**9]}, 400, "diffusion_seed_canvas"),
        ({"x_diffusion_seed_canvas": None, "x_diffusion_pinned": [1, 2]}, 400, "diffusion_pinned"),
        ({"x_diffusion_pinned": [99]}, 400, "diffusion_pinned"),
        ({"x_diffusion_canvas_length": 128}, 400, "diffusion_canvas_length"),
        ({"x_diffusion_max_steps": 0}, 400, "diffusion_max_steps"),
        # vLLM takes any positive count; one model lock here means one huge read would hold every other
        ({"x_diffusion_max_steps": 10**6}, 400, "at most 8 steps (serve-model --max-steps)"),
        # a template of the caller's own runs code in the server (vLLM refuses it unless trusted), and the
        # template's own arguments changed what it returns: each was a 500
        ({"chat_template": "{{ 1 }}"}, 400, "untrusted chat template"),
        ({"chat_template_kwargs": {"chat_template": "{% for %}"}}, 400, "untrusted chat template"),
        ({"chat_template_kwargs": {"tokenize": True}}, 400, "may not set tokenize"),
        ({"chat_template_kwargs": {"documents": 5, "conversation": []}}, 400, "may not set conversation, documents"),
        ({"x_diffusion_read_only": "yes"}, 400, "diffusion_read_only"),
        ({"x_diffusion_constrained": True}, 400, "logprob_token_ids"),
        ({"temperature": 0.5}, 400, "temperature"),
        ({"seed": 1}, 400, "seed"),
        (
            {"logprobs": None, "top_logprobs": None, "logprob_token_ids": [1]},
            400,
            "when using `logprob_token_ids`, `logprobs` must be set to true",
        ),
        ({"top_logprobs": 25}, 400, "greater than max allowed: 20"),  # vLLM's default --max-logprobs
        ({"top_logprobs": -1}, 400, "greater than max allowed: 20"),  # the whole vocabulary, without ids
        ({"top_logprobs": -2}, 400, "must be a positive value or -1"),
        ({"logprobs": False, "top_logprobs": 3}, 400, "`logprobs` must be set to true"),
        ({"temperature": 0.7}, 400, "not yet supported with diffusion models"),
        ({"min_p": 0.1}, 400, "not yet supported with diffusion models"),
        # SamplingParams' own range checks come first in vLLM: a negative min_p is no neutral value (it passed)
        ({"min_p": -1}, 400, "min_p must be in [0, 1], got -1"),
        ({"temperature": -0.5}, 400, "temperature must be non-negative, got -0.5"),
        ({"n": 5}, 400, "one choice"),  # a read has one canvas; five were asked and one answered
        ({"top_logprobs": 1e300}, 400, "exceeded maximum size"),  # pydantic's int; its 300 digits were the message
        ({"min_tokens": 2}, 400, "not yet supported with diffusion models"),
        ({"logit_bias": {"5": 1.0}}, 400, "not yet supported with diffusion models"),
        ({"logprob_token_ids": list(range(129))}, 400, "greater than max allowed: 128"),
        ({"model": "other"}, 404, "does not exist"),
        ({"messages": []}, 400, "messages"),
    ],
)
def test_server_validates_requests_as_vllm_does(vllm_server, changes, status, says):
    response = post(vllm_server, **changes)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == status and says in error["message"] and len(error["message"]) < 300


@pytest.mark.parametrize(
    "changes",
    [
        {"chat_template_kwargs": {"bos_token": "ab " * 2_700_000}},  # a template argument's text counts too
        {"messages": [{"role": "user", "content": ""}] * 200_000},  # and each message's turn markers
    ],
)
def test_a_request_sure_to_be_past_the_context_is_refused_before_rendering(
    vllm_server, dgemma_engine, monkeypatch, changes
):
    """Each of these was rendered and tokenised whole (6 s of the server's CPU) before its 400."""
    rendered = []
    render = dgemma_engine.tokenizer.apply_chat_template
    monkeypatch.setattr(
        dgemma_engine.tokenizer, "apply_chat_template", lambda *a, **k: rendered.append(1) or render(*a, **k)
    )
    response = post(vllm_server, **changes)
    assert response.status_code == 400 and "maximum context length" in response.json()["error"]["message"]
    assert rendered == []


def test_the_step_cap_is_the_servers_to_set(dgemma_engine):
    from diffjev.serve import create_app

    with LocalServer(create_app(dgemma_engine, SERVED_NAME, canvas_length=64, max_steps=2)) as server:
        assert post(server, x_diffusion_max_steps=2).status_code == 200
        refused = post(server, x_diffusion_max_steps=3)
        assert refused.status_code == 400 and "at most 2 steps" in refused.json()["error"]["message"]


@pytest.mark.parametrize(
    "changes",
    [
        # vLLM refuses only values that change sampling: the neutral ones pass
        {"temperature": 1.0, "min_p": 0, "min_tokens": 0},
        {"logit_bias": {}, "bad_words": [], "allowed_token_ids": []},
        # with logprob_token_ids, top-k is not asked for, so any top_logprobs passes
        {"logprob_token_ids": [11262, 951], "top_logprobs": 40},
        {"logprob_token_ids": [11262, 951], "top_logprobs": -1},
        # `n` as vLLM's pydantic int reads it: each of these is 1 (each was refused as "one choice")
        {"n": 1.0},
        {"n": "1"},
        {"n": True},
    ],
)
def test_server_takes_what_vllm_takes(vllm_server, changes):
    response = post(vllm_server, **changes)
    assert response.status_code == 200, response.text
    if "logprob_token_ids" in changes:
        entry = response.json()["choices"][0]["logprobs"]["content"][0]
        asked = {f"token_id:{i}" for i in changes["logprob_token_ids"]}
        assert asked <= {t["token"] for t in entry["top_logprobs"]} <= asked | {entry["token"]}


def test_server_answers_in_vllms_chat_shape(vllm_server, tokenizer):
    ids = [11262, 951]
    data = post(vllm_server, logprob_token_ids=ids).json()
    assert data["object"] == "chat.completion" and data["model"] == SERVED_NAME
    content = data["choices"][0]["logprobs"]["content"]
    assert len(content) == 16  # read-only: one entry per canvas position
    for entry in content:
        assert entry["token"].startswith("token_id:") and isinstance(entry["logprob"], float)
        sampled = int(entry["token"].removeprefix("token_id:"))
        # vLLM's order: the sampled token first, then every asked id once
        expected = list(dict.fromkeys([sampled, *ids]))
        assert [t["token"] for t in entry["top_logprobs"]] == [f"token_id:{i}" for i in expected]
        assert entry["top_logprobs"][0]["logprob"] == entry["logprob"]
        # the entry's bytes are its text's (vLLM's decoded_token); a candidate's are its shown token's
        assert entry["bytes"] == list(tokenizer.decode([sampled]).encode("utf-8", errors="replace"))
        assert all(t["bytes"] == list(t["token"].encode()) for t in entry["top_logprobs"])
    top_k = post(vllm_server, return_tokens_as_token_ids=False).json()["choices"][0]["logprobs"]["content"]
    assert len(top_k[0]["top_logprobs"]) == 5
    lps = [t["logprob"] for t in top_k[0]["top_logprobs"]]
    assert lps == sorted(lps, reverse=True) and not top_k[0]["token"].startswith("token_id:")
    assert data["usage"]["completion_tokens"] == 16


def test_unreachable_server_names_the_endpoint(tokenizer, schema):
    url = closed_port_url()
    engine = VLLMServerEngine(url, model="m", tokenizer=tokenizer)
    started = time.monotonic()
    with pytest.raises(EngineError, match="cannot reach the vLLM server at " + url):
        read(schema, "x", engine)
    assert time.monotonic() - started < 10


def test_a_silent_server_times_out_with_a_clear_error(tokenizer, schema):
    with Silent() as silent:
        engine = VLLMServerEngine(silent.url, model="m", tokenizer=tokenizer, timeout=1.0)
        started = time.monotonic()
        with pytest.raises(EngineError, match=f"{silent.url}/v1/chat/completions did not answer within"):
            read(schema, "x", engine)
        assert time.monotonic() - started < 10
        engine.close()


@pytest.mark.parametrize(
    "status, body, says",
    [
        (
            500,
            json.dumps({"error": {"message": "EngineCore died", "type": "InternalServerError", "code": 500}}).encode(),
            "answered 500 (Internal Server Error)",
        ),
        (200, b"{not json", "malformed JSON"),
        (
            200,
            json.dumps({"choices": [{"message": {"content": "yes"}, "logprobs": None}]}).encode(),
            "no usable choices[0].logprobs.content",
        ),
    ],
)
def test_faulty_answers_give_clear_errors_naming_the_endpoint(tokenizer, schema, status, body, says):
    with CannedFault(status, body) as server:
        engine = VLLMServerEngine(server.url, model="m", tokenizer=tokenizer)
        with pytest.raises(EngineError) as err:
            read(schema, "x", engine)
        assert says in str(err.value) and server.url in str(err.value)
        assert "EngineCore died" not in str(err.value) and "not json" not in str(err.value)  # never the body
        engine.close()


@pytest.mark.parametrize("given, as_ids", [("false", False), ("0", False), ("true", True), (1, True), (None, False)])
def test_server_reads_return_tokens_as_token_ids_as_vllm_does(vllm_server, given, as_ids):
    """vLLM's request model reads the flag as a pydantic bool: the string "false" is false, not a truthy string."""
    token = post(vllm_server, return_tokens_as_token_ids=given).json()["choices"][0]["logprobs"]["content"][0]["token"]
    assert token.startswith("token_id:") == as_ids


def test_server_refuses_a_return_tokens_as_token_ids_that_is_no_bool(vllm_server):
    response = post(vllm_server, return_tokens_as_token_ids="maybe")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "return_tokens_as_token_ids" and "must be a bool" in error["message"]


IMAGE_PART = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}


def test_server_refuses_an_image_part_naming_it_and_saying_it_reads_text_only(vllm_server):
    """The stand-in's model reads text: an image part gets vLLM's 400 naming the part, never a read of the
    text alone as if the image had been seen."""
    turn = {"role": "user", "content": [IMAGE_PART, {"type": "text", "text": "hi"}]}
    response = post(vllm_server, messages=[{"role": "system", "content": "be brief"}, turn])
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "BadRequestError" and error["code"] == 400
    assert error["param"] == "messages[1].content[0]"
    assert "messages[1].content[0]" in error["message"] and "image_url" in error["message"]
    assert "reads text only" in error["message"]


@pytest.mark.parametrize(
    "part, says",
    [
        ("hi", "messages[0].content[0] must be an object"),
        ({"type": "text"}, "messages[0].content[0].text must be a string"),
        ({"type": "audio_url", "audio_url": {"url": "x"}}, "of type 'audio_url', but this server reads text only"),
    ],
)
def test_server_names_a_content_part_it_cannot_read(vllm_server, part, says):
    response = post(vllm_server, messages=[{"role": "user", "content": [part]}])
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"].startswith("messages[0].content[0]") and says in error["message"]


def test_server_reads_text_parts_as_vllm_does(vllm_server):
    """Text parts are text: vLLM joins them with newlines, so the read is that of the joined string."""
    parts = [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}]
    as_parts = post(vllm_server, messages=[{"role": "user", "content": parts}])
    as_text = post(vllm_server, messages=[{"role": "user", "content": "hi\nthere"}])
    assert as_parts.status_code == 200, as_parts.text
    assert as_parts.json()["choices"][0]["logprobs"] == as_text.json()["choices"][0]["logprobs"]


def test_the_tiny_served_model_needs_no_tokenizer_flag(vllm_server, monkeypatch):
    # `serve-model --tiny` serves the random DiffusionGemma under this name with the offline Gemma tokenizer;
    # a client naming it reads with that tokenizer, with nothing looked up on the Hub.
    from diffjev.engines.auto import EngineChoice, choose_engine
    from diffjev.tiny import TINY_SERVED_NAME

    monkeypatch.delenv("DIFFJEV_TOKENIZER", raising=False)
    chosen = choose_engine(EngineChoice(kind="vllm", url=vllm_server.url, model=TINY_SERVED_NAME))
    assert chosen.engine.tokenizer.convert_tokens_to_ids("<start_of_turn>") is not None
    chosen.engine.close()
