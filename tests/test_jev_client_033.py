"""The Jev API client against vLLM 0.33's decision API: `joint: true` where the server reads jointly, found
out on the first read and remembered, with the fallback where a server refuses it (0.33 on a model without
joint reads) or ignores it (0.32); and `POST /v1/decisions`' strict request and answers. Every server here
is real HTTP on localhost; the distributions are checked against the tiny DiffusionGemma read in-process."""

from __future__ import annotations

import threading

import httpx
import orjson
import pytest
from conftest import SERVED_NAME, STATES, LocalServer
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from faulty_servers import CannedFault

from diffjev import EngineError, Schema, SchemaError, read, read_many
from diffjev.decide import slot_distribution
from diffjev.engines import JevAPIEngine
from diffjev.engines.jev_api import decisions_question
from diffjev.jev import question_canvas


SCHEMA = Schema.from_dict(
    {
        "questions": [
            {"id": "urgent", "type": "yes_no", "instructions": "Does the customer need a reply within the hour?"},
            {
                "id": "team",
                "type": "choice",
                "instructions": "Which team should handle it?",
                "options": ["billing", {"name": "technical", "description": "bugs, outages"}, "account"],
            },
            {"id": "tone", "type": "score", "instructions": "How upset is the customer?", "levels": ["calm", "angry"]},
        ]
    }
)
# The top-level fields of vLLM 0.33's StructuredDecisionRequest (extra="forbid"); 0.32 had all but `joint`.
SYSTEMONE_033_FIELDS = {
    "model",
    "state",
    "questions",
    "instructions",
    "images",
    "audio",
    "videos",
    "chat_template_kwargs",
    "joint",
    "cache_salt",
    "priority",
    "request_id",
}


class UpstreamLike:
    """A real server in front of serve-model's `/v1/systemone` that validates the top level as a vLLM
    release does: `"0.33-no-joint"` refuses unknown fields with a 400 and `joint: true` with the 400 vLLM
    0.33 gives a model without joint reads, and answers with `joint: null`; `"0.32"` ignores unknown fields
    (`joint` among them) and answers without a `joint` key. It records every body it was sent."""

    def __init__(self, upstream_url: str, version: str):
        self.bodies: list[dict] = []
        self.lock = threading.Lock()
        app = FastAPI()

        @app.post("/v1/systemone")
        async def systemone(request: Request):
            body = orjson.loads(await request.body())
            with self.lock:
                self.bodies.append(body)
            if version == "0.33-no-joint":
                unknown = sorted(set(body) - SYSTEMONE_033_FIELDS)
                if unknown:
                    return _error(f"{unknown[0]}: Extra inputs are not permitted")
                if not isinstance(body.get("joint", False), bool):
                    return _error("joint: Input should be a valid boolean")
                if body.get("joint"):
                    return _error("joint: this model reads each question on its own; joint reads need DiffusionGemma")
            forwarded = {k: v for k, v in body.items() if k != "joint"}  # the model behind reads per question
            async with httpx.AsyncClient(timeout=60) as client:
                answer = (await client.post(f"{upstream_url}/v1/systemone", json=forwarded)).json()
            answer.pop("joint", None)
            if version == "0.33-no-joint":
                answer["joint"] = None
            return JSONResponse(answer)

        self.server = LocalServer(app)
        self.url = self.server.url

    def __enter__(self):
        self.server.__enter__()
        return self

    def __exit__(self, *exc):
        self.server.__exit__(*exc)


def _error(message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "BadRequestError", "param": None, "code": 400}}, 400)


def per_question_expected(engine, state):
    """Each question read on its own upstream canvas, in-process: what a per-question server answers."""
    out = {}
    for q in SCHEMA.questions:
        canvas = question_canvas(engine.builder, q, state)
        out[q.id] = slot_distribution(q, canvas.label_ids[q.id], engine.read([canvas])[0][q.id])
    return out


def assert_matches(decision, expected):
    for qid, dist in expected.items():
        got = decision.answers[qid]
        assert list(got.probabilities.values()) == pytest.approx(list(dist.probs), abs=1e-5)
        assert got.label_mass == pytest.approx(dist.label_mass, rel=1e-4)


@pytest.mark.parametrize(
    "version, says", [("0.33-no-joint", "answered 400 to joint: true"), ("0.32", "ignored joint: true")]
)
def test_a_server_without_joint_reads_is_found_out_once_and_read_per_question(
    vllm_server, dgemma_engine, version, says
):
    with UpstreamLike(vllm_server.url, version) as server:
        engine = JevAPIEngine(server.url, model=SERVED_NAME)
        decisions = list(read_many(SCHEMA, STATES, engine))
        engine.close()
    sent_joint = [body.get("joint") for body in server.bodies]
    # The first read asks jointly; once the server has shown it cannot, no request asks again.
    assert sent_joint[0] is True
    if version == "0.33-no-joint":  # refused, then made again without the field
        assert sent_joint[1] is None and len(server.bodies) == len(STATES) + 1
    else:
        assert len(server.bodies) == len(STATES)
    assert all(joint is None for joint in sent_joint[1:])
    assert engine.joint_supported is False
    for state, decision in zip(STATES, decisions):
        d = decision.diagnostics
        assert d["joint"] is False and d["joint_diagnostics"] is None and says in d["joint_note"]
        assert server.url in d["joint_note"]
        assert d["model_passes"] == len(SCHEMA.questions)  # one canvas per question
        assert_matches(decision, per_question_expected(dgemma_engine, state))


def test_joint_false_never_asks(vllm_server):
    with UpstreamLike(vllm_server.url, "0.33-no-joint") as server:
        engine = JevAPIEngine(server.url, model=SERVED_NAME, joint=False)
        decision = read(SCHEMA, STATES[0], engine)
        engine.close()
    assert [b.get("joint") for b in server.bodies] == [None]
    assert decision.diagnostics["joint"] is False and "not asked for" in decision.diagnostics["joint_note"]


def test_a_first_read_that_fails_otherwise_leaves_the_question_open():
    with CannedFault(500, b'{"error": {"message": "SECRET internal detail"}}') as broken:
        engine = JevAPIEngine(broken.url)
        with pytest.raises(EngineError) as raised:
            read(SCHEMA, "x", engine)
        assert "500" in str(raised.value) and "SECRET" not in str(raised.value)
        assert engine.joint_supported is None  # not known yet: the next read asks jointly again
        assert len(broken.requests) == 1
        engine.close()


def test_a_400_without_joint_too_is_the_reads_own_error_and_quotes_nothing():
    with CannedFault(400, b'{"error": {"message": "SECRET from the server"}}') as refusing:
        url = refusing.url.replace("http://", "http://operator:PASSWORD@")
        engine = JevAPIEngine(url)
        with pytest.raises(EngineError) as raised:
            read(SCHEMA, "x", engine)
        engine.close()
    message = str(raised.value)
    assert f"the Jev API at {refusing.url}/v1/systemone answered 400" in message
    assert "SECRET" not in message and "PASSWORD" not in message
    assert len(refusing.requests) == 2  # once with joint: true, once without


def test_malformed_joint_diagnostics_are_named():
    body = orjson.dumps(
        {
            "answers": {"urgent": {"type": "noul", "noul": 0.5, "probabilities": {"yes": 0.5, "no": 0.5}}},
            "diagnostics": {},
            "joint": {"canvases": "three"},
        }
    )
    only_urgent = Schema.from_dict({"questions": [{"id": "urgent", "type": "yes_no", "instructions": "?"}]})
    with CannedFault(200, body) as wrong:
        engine = JevAPIEngine(wrong.url)
        with pytest.raises(EngineError, match="joint diagnostics that are not a list of canvases"):
            read(only_urgent, "x", engine)
        engine.close()


# --- POST /v1/decisions ---------------------------------------------------------------------------------


def test_the_decisions_request_is_upstreams_strict_form():
    engine = JevAPIEngine("http://127.0.0.1:9", model=SERVED_NAME, api="decisions")
    with_instructions = Schema.from_dict({**SCHEMA.to_dict(), "instructions": "Support tickets."})
    body = engine.request_body(with_instructions, {"subject": "Refund", "body": "Où est mon argent ?"})
    engine.close()
    assert set(body) == {"model", "input", "questions"} and body["model"] == SERVED_NAME
    # No field for instructions: they are a first user message, joined to the item by the server.
    assert body["input"] == [
        {"role": "user", "content": "Support tickets."},
        {"role": "user", "content": '{"subject": "Refund", "body": "Où est mon argent ?"}'},
    ]
    assert body["questions"] == [
        {"type": "predicate", "name": "urgent", "instructions": "Does the customer need a reply within the hour?"},
        {
            "type": "choice",
            "name": "team",
            "instructions": "Which team should handle it?",
            "choices": [
                {"value": "billing"},
                {"value": "technical", "description": "bugs, outages"},
                {"value": "account"},
            ],
        },
        {
            "type": "score",
            "name": "tone",
            "instructions": "How upset is the customer?",
            "levels": [{"label": "calm"}, {"label": "angry"}],
        },
    ]
    assert decisions_question(SCHEMA.question("urgent"))["type"] == "predicate"


@pytest.mark.parametrize(
    "question, field, says",
    [
        (
            {"id": "q", "type": "yes_no", "instructions": "?", "criteria": {"true": "soon"}},
            "criteria",
            "takes no descriptions of yes and no",
        ),
        ({"id": "q", "type": "span", "instructions": "Which product?"}, "type", "no span questions"),
    ],
)
def test_what_the_decisions_api_cannot_ask_is_refused_naming_the_field(question, field, says):
    engine = JevAPIEngine("http://127.0.0.1:9", model=SERVED_NAME, api="decisions")
    with pytest.raises(SchemaError, match=says) as raised:
        read(Schema.from_dict({"questions": [question]}), "x", engine)
    engine.close()
    assert raised.value.field == field and "api='systemone'" in str(raised.value)


def test_a_staged_question_is_refused_by_the_decisions_api():
    staged = Schema.from_dict(
        {
            "questions": [
                {"id": "urgent", "type": "yes_no", "instructions": "?"},
                {
                    "id": "why",
                    "type": "choice",
                    "instructions": "?",
                    "options": ["a", "b"],
                    "ask_if": {"urgent": "yes"},
                },
            ]
        }
    )
    engine = JevAPIEngine("http://127.0.0.1:9", model=SERVED_NAME, api="decisions")
    with pytest.raises(SchemaError, match="unconditionally") as raised:
        engine.check_schema(staged)
    engine.close()
    assert raised.value.field == "ask_if"


def test_the_decisions_api_needs_a_model_and_a_known_api():
    with pytest.raises(EngineError, match="needs the served model name"):
        JevAPIEngine("http://127.0.0.1:9", api="decisions")
    with pytest.raises(EngineError, match="unknown decision API 'chat'"):
        JevAPIEngine("http://127.0.0.1:9", model="m", api="chat")


def test_a_server_without_decisions_says_which_version_has_it():
    with CannedFault(404, b'{"detail": "Not Found SECRET"}') as old:
        engine = JevAPIEngine(old.url, model=SERVED_NAME, api="decisions")
        with pytest.raises(EngineError) as raised:
            read(SCHEMA, "x", engine)
        engine.close()
    message = str(raised.value)
    assert f"the Decisions API at {old.url}/v1/decisions answered 404" in message
    assert "vLLM 0.33 or later" in message and "api='systemone'" in message and "SECRET" not in message


def decisions_answer(**change):
    answers = [
        {"type": "predicate", "name": "urgent", "probability": 0.8},
        {
            "type": "choice",
            "name": "team",
            "choice": "technical",
            "probabilities": [
                {"value": "billing", "probability": 0.2},
                {"value": "technical", "probability": 0.5},
                {"value": "account", "probability": 0.3},
            ],
            "confidence": 0.25,
        },
        {
            "type": "score",
            "name": "tone",
            "score": 0.4,
            "probabilities": [
                {"value": 0, "label": "calm", "probability": 0.6},
                {"value": 1, "label": "angry", "probability": 0.4},
            ],
            "confidence": 0.6,
        },
    ]
    answers[change.pop("at", 0)].update(change)
    return orjson.dumps({"model": SERVED_NAME, "answers": answers, "usage": {"input_tokens": 9, "output_tokens": 6}})


def test_decisions_answers_become_decisions_saying_what_the_api_does_not_give():
    with CannedFault(200, decisions_answer()) as server:
        engine = JevAPIEngine(server.url, model=SERVED_NAME, api="decisions", joint=False)
        decision = read(SCHEMA, "x", engine)
        engine.close()
    urgent, team, tone = (decision.answers[q] for q in ("urgent", "team", "tone"))
    assert urgent.probabilities == pytest.approx({"yes": 0.8, "no": 0.2}) and urgent.answer == "yes"
    assert team.probabilities == pytest.approx({"billing": 0.2, "technical": 0.5, "account": 0.3})
    assert team.answer == "technical" and team.label_mass == pytest.approx(0.5)  # confidence 0.25 / top 0.5
    assert tone.probabilities == pytest.approx({"calm": 0.6, "angry": 0.4}) and tone.label_mass == pytest.approx(1.0)
    d = decision.diagnostics
    assert d["api"] == "decisions" and d["model_passes"] == 3 and d["joint"] is False
    assert d["not_given"] == {"argmax_is_label": True, "label_mass": ["urgent"]}
    assert d["usage"] == {"input_tokens": 9, "output_tokens": 6}


@pytest.mark.parametrize(
    "change, says",
    [
        ({"at": 0, "name": "other"}, "answers[0] is not a usable predicate answer to urgent: it is not named"),
        ({"at": 0, "probability": 1.7}, "answers[0] is not a usable predicate answer to urgent: a probability"),
        ({"at": 1, "probabilities": [{"value": "billing", "probability": 1.0}]}, "do not give each option once"),
        ({"at": 2, "type": "choice"}, "answers[2] is not a usable score answer to tone: its type is not score"),
        ({"at": 1, "confidence": None}, "answers[1] is not a usable choice answer to team: a probability"),
    ],
)
def test_a_decisions_answer_that_is_wrong_is_named_without_quoting_it(change, says):
    with CannedFault(200, decisions_answer(**change)) as server:
        engine = JevAPIEngine(server.url, model=SERVED_NAME, api="decisions", joint=False)
        with pytest.raises(EngineError, match=says.replace("[", r"\[").replace("]", r"\]")) as raised:
            read(SCHEMA, "x", engine)
        engine.close()
    assert f"the Decisions API at {server.url}/v1/decisions" in str(raised.value)


# --- against serve-model: per question, joint, and /v1/decisions, each checked against an in-process read ---

SERVED_WIDTH = 64  # conftest's vllm_server


def joint_expected(engine, schema, state):
    """The schema read on upstream's joint canvases in-process and scored as vLLM scores them (a label by
    the larger of its two spellings): each question's read, and the canvases (one model pass each)."""
    from diffjev.jev import joint_canvases, read_upstream

    canvases = joint_canvases(engine.builder, schema, state, schema.instructions or "", SERVED_WIDTH)
    return read_upstream(engine, canvases), canvases


def test_serve_model_reads_jointly_as_upstreams_layout_read_in_process(vllm_server, dgemma_engine):
    engine = JevAPIEngine(vllm_server.url, model=SERVED_NAME)
    decisions = list(read_many(SCHEMA, STATES, engine))
    engine.close()
    assert engine.joint_supported is True
    for state, decision in zip(STATES, decisions):
        expected, canvases = joint_expected(dgemma_engine, SCHEMA, state)
        d = decision.diagnostics
        assert d["joint"] is True and d["joint_note"] == ""
        served = d["joint_diagnostics"]["canvases"]
        assert [c["questions"] for c in served] == [list(c.label_ids) for c in canvases]
        assert [c["slots"] for c in served] == [list(c.slots.values()) for c in canvases]
        assert d["model_passes"] == len(served) == len(canvases)
        assert_matches(decision, expected)


def test_serve_model_per_question_when_joint_is_off(vllm_server, dgemma_engine):
    engine = JevAPIEngine(vllm_server.url, model=SERVED_NAME, joint=False)
    decision = read(SCHEMA, STATES[1], engine)
    engine.close()
    assert decision.diagnostics["joint"] is False and decision.diagnostics["model_passes"] == 3
    assert_matches(decision, per_question_expected(dgemma_engine, STATES[1]))


def decisions_read_schema(schema):
    """The questions as vLLM's Decisions API reads them (adapters.make_read_question): a predicate as the
    choice false / true, a choice's values JSON-encoded, a score's levels as lettered options."""
    import json

    questions = []
    for q in schema.questions:
        if q.kind == "yes_no":
            options = ["false", "true"]
        else:
            options = [
                {"name": json.dumps(a.name) if q.kind == "choice" else a.name, "description": a.description}
                for a in q.alternatives
            ]
        questions.append({"id": q.id, "type": "choice", "instructions": q.instructions, "options": options})
    return Schema.from_dict({"questions": questions})


@pytest.mark.parametrize("joint", [False, True])
def test_serve_model_decisions_match_an_in_process_read_of_the_same_canvases(vllm_server, dgemma_engine, joint):
    engine = JevAPIEngine(vllm_server.url, model=SERVED_NAME, api="decisions", joint=joint)
    decision = read(SCHEMA, STATES[0], engine)
    engine.close()
    read_as = decisions_read_schema(SCHEMA)
    if joint:
        expected, _ = joint_expected(dgemma_engine, read_as, STATES[0])
    else:
        expected = {}
        for q in read_as.questions:
            canvas = question_canvas(dgemma_engine.builder, q, STATES[0])
            expected[q.id] = slot_distribution(q, canvas.label_ids[q.id], dgemma_engine.read([canvas])[0][q.id])
    p_false, p_true = expected["urgent"].probs
    assert decision.answers["urgent"].probabilities["yes"] == pytest.approx(p_true, abs=1e-5)
    for qid in ("team", "tone"):
        got = decision.answers[qid]
        assert list(got.probabilities.values()) == pytest.approx(list(expected[qid].probs), abs=1e-5)
        assert got.label_mass == pytest.approx(expected[qid].label_mass, rel=1e-4)
    assert decision.diagnostics["joint"] is joint and decision.diagnostics["api"] == "decisions"


def test_a_joint_decisions_read_says_it_cannot_count_its_canvases():
    with CannedFault(200, decisions_answer()) as server:
        engine = JevAPIEngine(server.url, model=SERVED_NAME, api="decisions")
        decision = read(SCHEMA, "x", engine)
        engine.close()
    d = decision.diagnostics
    assert engine.joint_supported is True and d["joint"] is True and d["joint_diagnostics"] is None
    assert d["model_passes"] is None and d["not_given"]["model_passes"] is True
