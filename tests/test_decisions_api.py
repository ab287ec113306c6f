"""serve-model against vLLM 0.33's decision API over real HTTP: `/v1/systemone` refuses what 0.33 refuses
with its ErrorResponse 400 naming the field, reads `joint: true` on 0.33's joint layout with one read per
chunk and the `joint` key, and `POST /v1/decisions` answers in its strict shapes from the model's read."""

import httpx
import pytest

from diffjev.jev import joint_canvases, read_upstream, upstream_schema
from conftest import SERVED_NAME, STATES
from test_jev_api import JEV_BODY

SERVED_WIDTH = 64  # conftest's vllm_server


def post(server, path, body, **kwargs):
    return httpx.post(f"{server.url}{path}", json=body, timeout=30, **kwargs)


def assert_error_400(response, param, says):
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == 400
    assert error["param"] == param and says in error["message"]


@pytest.mark.parametrize(
    "change, param, says",
    [
        ({"joint": 1}, "joint", "valid boolean"),
        ({"surprise": True}, "surprise", "Extra inputs"),
        ({"priority": 2**63}, "priority", "less than or equal"),
        ({"cache_salt": "a/b"}, "cache_salt", "must not contain"),
        ({"cache_salt": ""}, "cache_salt", "non-empty"),
    ],
)
def test_systemone_refuses_what_vllm_033_refuses(vllm_server, change, param, says):
    assert_error_400(post(vllm_server, "/v1/systemone", {**JEV_BODY, **change}), param, says)


def test_systemone_takes_what_vllm_033_takes(vllm_server):
    body = {**JEV_BODY, "state": {"ticket": STATES[0]}, "priority": -(2**63), "cache_salt": "salt", "joint": False}
    response = post(vllm_server, "/v1/systemone", body)
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["joint"] is None and data["id"].startswith("decision-")


def test_the_id_is_decision_and_the_request_id_or_the_header(vllm_server):
    assert post(vllm_server, "/v1/systemone", {**JEV_BODY, "request_id": "r1"}).json()["id"] == "decision-r1"
    headed = post(vllm_server, "/v1/systemone", {**JEV_BODY, "request_id": "r1"}, headers={"X-Request-Id": "h2"})
    assert headed.json()["id"] == "decision-h2"


def test_joint_reads_one_canvas_per_chunk_and_says_so(vllm_server, dgemma_engine):
    data = post(vllm_server, "/v1/systemone", {**JEV_BODY, "joint": True}).json()
    schema = upstream_schema(JEV_BODY["questions"])
    canvases = joint_canvases(dgemma_engine.builder, schema, STATES[0], "", SERVED_WIDTH)
    assert data["joint"] == {
        "canvases": [
            {"questions": list(c.slots), "width": len(c.ids), "slots": list(c.slots.values())} for c in canvases
        ]
    }
    # Scored as vLLM scores a joint read: each label by the larger of its two spellings' logprobs.
    reads = read_upstream(dgemma_engine, canvases)
    for q in schema.questions:
        got = data["answers"][q.id]["probabilities"]
        assert list(got.values()) == pytest.approx(list(reads[q.id].probs), abs=1e-5)
        assert data["diagnostics"][q.id] == {
            "label_mass": pytest.approx(reads[q.id].label_mass, abs=1e-6),
            "argmax_is_label": reads[q.id].argmax_is_label,
        }


def test_many_questions_split_into_several_joint_canvases(vllm_server):
    questions = {f"q{i}": {"type": "noul", "instructions": f"Is it about topic {i}?"} for i in range(20)}
    data = post(vllm_server, "/v1/systemone", {**JEV_BODY, "questions": questions, "joint": True}).json()
    canvases = data["joint"]["canvases"]
    assert len(canvases) > 1 and [q for c in canvases for q in c["questions"]] == list(questions)
    assert all(c["width"] <= SERVED_WIDTH and c["width"] % 16 == 0 for c in canvases)


def test_one_question_reads_on_its_own_prompt_even_when_joint(vllm_server):
    body = {**JEV_BODY, "questions": {"urgent": JEV_BODY["questions"]["urgent"]}, "joint": True}
    data = post(vllm_server, "/v1/systemone", body).json()
    assert data["joint"] is None  # vLLM 0.33's _admit: joint only with more than one question


DECISIONS_BODY = {
    "model": SERVED_NAME,
    "input": STATES[0],
    "questions": [
        {"type": "predicate", "name": "urgent", "instructions": "Does the customer need a reply within the hour?"},
        {
            "type": "choice",
            "name": "team",
            "instructions": "Which team should handle it?",
            "choices": [{"value": "billing"}, {"value": "technical", "description": "bugs, outages"}],
        },
        {
            "type": "score",
            "instructions": "How upset is the customer?",
            "levels": [{"label": "calm"}, {"label": "annoyed"}, {"label": "furious"}],
        },
    ],
}


@pytest.mark.parametrize("joint", [False, True])
def test_decisions_answers_in_its_shapes(vllm_server, joint):
    response = post(vllm_server, "/v1/decisions", {**DECISIONS_BODY, "joint": joint})
    assert response.status_code == 200, response.text
    data = response.json()
    assert set(data) == {"model", "answers", "usage"} and data["model"] == SERVED_NAME
    urgent, team, tone = data["answers"]
    assert urgent["type"] == "predicate" and urgent["name"] == "urgent" and 0 < urgent["probability"] < 1
    assert team["type"] == "choice" and team["choice"] in ("billing", "technical")
    assert [p["value"] for p in team["probabilities"]] == ["billing", "technical"]
    top = max(p["probability"] for p in team["probabilities"])
    assert team["choice"] == max(team["probabilities"], key=lambda p: p["probability"])["value"]
    assert 0 < team["confidence"] <= top
    assert tone["type"] == "score" and tone["name"] is None
    assert tone["score"] == pytest.approx(sum(p["value"] * p["probability"] for p in tone["probabilities"]))
    usage = data["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"] and usage["input_tokens"] > 0
    # Read by the model, not canned: another input reads otherwise.
    other = post(vllm_server, "/v1/decisions", {**DECISIONS_BODY, "input": STATES[1], "joint": joint}).json()
    assert other["answers"] != data["answers"]


@pytest.mark.parametrize(
    "change, param, says",
    [
        ({"questions": []}, "questions", "at least 1"),
        ({"joint": "yes"}, "joint", "valid boolean"),
        ({"extra": 1}, "extra", "Extra inputs"),
        (
            {"questions": [{"type": "choice", "instructions": "?", "choices": [{"value": "a"}]}]},
            "questions.0.choice.choices",
            "at least 2",
        ),
        (
            {"questions": [{"type": "score", "instructions": "?", "levels": [{"label": str(i)} for i in range(11)]}]},
            "questions.0.score.levels",
            "at most 10",
        ),
        ({"cache_salt": "a@b"}, "cache_salt", "must not contain"),
        # past the context, the longest field is the one named to shorten
        ({"input": "word " * 200_000}, "input", "reduce the length of the input"),
    ],
)
def test_decisions_refuses_what_vllm_033_refuses(vllm_server, change, param, says):
    assert_error_400(post(vllm_server, "/v1/decisions", {**DECISIONS_BODY, **change}), param, says)
