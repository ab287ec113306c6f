"""The Jev decision API: the server's `/v1/systemone` in vLLM's shapes (one canvas read per question),
JevAPIEngine reading through it, and bad bodies answered with a 400 that says what is wrong."""

import json
import time

import httpx
import pytest

from diffjev import EngineError, Schema, SchemaError, read, read_many
from diffjev.decide import slot_distribution
from diffjev.engines import JevAPIEngine
from diffjev.jev import question_canvas
from conftest import SERVED_NAME, STATES, TICKETS, LocalServer
from faulty_servers import closed_port_url

JEV_BODY = {
    "model": SERVED_NAME,
    "state": STATES[0],
    "questions": {
        "urgent": {
            "type": "noul",
            "instructions": "Does the customer need a reply within the hour?",
            "criteria": {"true": "a reply is needed soon", "false": "it can wait"},
        },
        "team": {
            "type": "choice",
            "instructions": "Which team should handle it?",
            "criteria": {"billing": None, "technical": "bugs, outages", "account": None},
        },
        "tone": {
            "type": "score",
            "instructions": "How upset is the customer?",
            "criteria": ["calm", "annoyed", "furious"],
        },
    },
}


def systemone(server, body):
    return httpx.post(f"{server.url}/v1/systemone", json=body, timeout=30)


def test_systemone_answers_in_vllms_shapes_and_repeats_exactly(vllm_server):
    first = systemone(vllm_server, JEV_BODY)
    assert first.status_code == 200
    data = first.json()
    assert data["object"] == "structured_decision" and data["model"] == SERVED_NAME
    urgent, team, tone = (data["answers"][k] for k in ("urgent", "team", "tone"))
    assert urgent["type"] == "noul" and set(urgent["probabilities"]) == {"yes", "no"}
    assert urgent["noul"] == pytest.approx(urgent["probabilities"]["yes"])
    assert team["type"] == "choice" and team["choice"] in ("billing", "technical", "account")
    assert team["choice"] == max(team["probabilities"], key=team["probabilities"].get)
    assert tone["legend"] == {"0": "calm", "1": "annoyed", "2": "furious"} and set(tone["probabilities"]) == {
        "0",
        "1",
        "2",
    }
    assert tone["score"] == pytest.approx(sum(int(k) * p for k, p in tone["probabilities"].items()))
    for answer, qid in ((urgent, "urgent"), (team, "team"), (tone, "tone")):
        mass = data["diagnostics"][qid]["label_mass"]
        assert answer["confidence"] == pytest.approx(max(answer["probabilities"].values()) * mass)
        assert sum(answer["probabilities"].values()) == pytest.approx(1.0)
    assert data["usage"]["input_tokens"] > 0 and data["usage"]["output_tokens"] == 6
    # The noise is seeded by the prompt, so the same request reads the same.
    assert systemone(vllm_server, JEV_BODY).json()["answers"] == data["answers"]


def test_jev_engine_matches_an_in_process_per_question_read(vllm_server, dgemma_engine):
    schema = Schema.from_dict({"questions": JEV_BODY["questions"]})
    # Per question: the engine asks for joint reads by default, which serve-model now answers on 0.33's joint layout.
    engine = JevAPIEngine(vllm_server.url, model=SERVED_NAME, joint=False)
    decisions = list(read_many(schema, STATES, engine))
    for state, decision in zip(STATES, decisions):
        for q in schema.questions:
            canvas = question_canvas(dgemma_engine.builder, q, state)
            expected = slot_distribution(q, canvas.label_ids[q.id], dgemma_engine.read([canvas])[0][q.id])
            got = decision.answers[q.id]
            assert list(got.probabilities.values()) == pytest.approx(list(expected.probs), abs=1e-5)
            assert got.label_mass == pytest.approx(expected.label_mass, rel=1e-4)
        assert decision.diagnostics["engine"] == "jev-api" and decision.diagnostics["model"] == SERVED_NAME
    engine.close()


@pytest.mark.parametrize(
    "change, says",
    [
        (
            {"questions": {"q": {"type": "choice", "instructions": "?", "criteria": {"a": None}, "depends": "x"}}},
            "depends",
        ),
        (
            {
                "questions": {
                    "q": {"type": "choice", "instructions": "?", "criteria": {f"o{i}": None for i in range(27)}}
                }
            },
            "at most 26",
        ),
        (
            {"questions": {"q": {"type": "score", "instructions": "?", "criteria": [f"l{i}" for i in range(11)]}}},
            "at most 10 options",
        ),
        ({"questions": {"q": {"type": "rating", "instructions": "?"}}}, "unknown question type"),
        ({"questions": {}}, "at least one question"),
        ({"questions": "urgent"}, "questions"),
        ({"model": "other"}, "does not exist"),
        ({"images": ["data:image/png;base64,AAAA"]}, "text states only"),
    ],
)
def test_bad_bodies_get_a_400_that_says_what_is_wrong(vllm_server, change, says):
    response = systemone(vllm_server, {**JEV_BODY, **change})
    assert response.status_code in (400, 404)
    assert says in response.json()["error"]["message"]


def test_a_body_that_is_not_json_is_a_400(vllm_server):
    response = httpx.post(
        f"{vllm_server.url}/v1/systemone", content=b"{oops", timeout=30, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]["message"]


def test_jev_engine_refuses_custom_templates_and_names_a_dead_endpoint(schema):
    custom = Schema.from_dict({**TICKETS, "template": "Urgent: {urgent}\nTeam: {team}\nTone: {tone}"})
    with pytest.raises(SchemaError, match="custom template"):
        read(custom, "x", JevAPIEngine("http://127.0.0.1:1"))
    url = closed_port_url()
    with pytest.raises(EngineError, match=f"cannot reach the Jev API at {url}/v1/systemone"):
        read(schema, "x", JevAPIEngine(url))


def test_an_answer_that_is_no_decision_is_named_without_the_urls_password(schema):
    from faulty_servers import CannedFault

    with CannedFault(200, b'{"answers": {}}') as wrong:
        with_password = wrong.url.replace("http://", "http://operator:SECRETPW@")
        with pytest.raises(EngineError, match="is not a structured decision") as raised:
            read(schema, "x", JevAPIEngine(with_password))
    assert f"the Jev API at {wrong.url}/v1/systemone" in str(raised.value) and "SECRETPW" not in str(raised.value)


def test_systemone_reads_a_deeply_nested_state(vllm_server):
    """A state nested 300 levels deep (JSON allows it; vLLM renders it with json.dumps) was a 500: measuring
    the fields for the context error ran orjson past its 255 levels."""
    body = json.loads(json.dumps(JEV_BODY))
    state = 1
    for _ in range(300):
        state = [state]
    body["state"] = state
    answer = systemone(vllm_server, body)
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(
    "where",
    [
        ["state"],  # a state is not cut on this route (vLLM's does not cut it either): it is refused
        ["instructions"],
        ["questions", "urgent", "instructions"],
    ],
)
def test_systemone_refuses_a_read_past_the_context_before_any_forward(vllm_server, where):
    """A 1 MB field once reached the model whole: a 500 after the host tried to allocate 40 GB."""
    body = json.loads(json.dumps(JEV_BODY))
    target = body
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = "word " * 200_000
    started = time.perf_counter()
    answer = systemone(vllm_server, body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert "maximum context length" in error["message"]
    assert error["param"] == where[0] and error["message"].endswith(f"reduce the length of the {where[0]}.")
    assert time.perf_counter() - started < 20
    assert systemone(vllm_server, JEV_BODY).status_code == 200  # and the server reads on


def test_a_public_system_one_client_reads_both_servers_answers_and_errors(vllm_server, dgemma_engine):
    """systemone-client (a public client of this API) sends a noul's criteria as text, reads `latency_ms`
    from an answer and `detail` from a refusal: serve-model and the studio's own route give it all three."""
    from fastapi import FastAPI
    from systemone import Choice, Client, Noul, Score, SystemOneError

    from diffjev.api import jev_router

    app = FastAPI()
    app.include_router(jev_router(lambda: dgemma_engine))
    questions = {
        "urgent": Noul("Does the customer need a reply within the hour?", criteria="they cannot work at all"),
        "team": Choice("Which team should handle it?", {"billing": None, "technical": "bugs, outages"}),
        "tone": Score("How upset is the customer?", ["calm", "annoyed", "furious"]),
    }
    with LocalServer(app) as studio:
        for server in (vllm_server, studio):
            with Client(server.url, model=SERVED_NAME) as client:
                answer = client.system_one(STATES[0], questions)
                assert 0 <= answer.nouls["urgent"].noul <= 1 and answer.choices["team"].choice in (
                    "billing",
                    "technical",
                )
                assert set(answer.scores["tone"].probabilities) == {"0", "1", "2"}
                assert isinstance(answer.latency_ms, float) and answer.latency_ms > 0
                assert answer.usage.input_tokens > 0
                with pytest.raises(SystemOneError) as refused:
                    client.system_one(STATES[0], {"urgent": {"type": "noul", "criteria": 7}})
                assert refused.value.status == 400
                assert "noul criteria must be an object with true and false, or the text of yes" in refused.value.detail
            # the text of yes is read as the description of yes, as {"true": text} is
            as_text = {"type": "noul", "instructions": "Urgent?", "criteria": "they cannot work at all"}
            as_object = {**as_text, "criteria": {"true": "they cannot work at all"}}
            read_text, read_object = (
                systemone(server, {"model": SERVED_NAME, "state": STATES[0], "questions": {"u": q}}).json()
                for q in (as_text, as_object)
            )
            assert read_text["answers"] == read_object["answers"]
