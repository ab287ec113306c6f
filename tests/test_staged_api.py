"""Staged questions through the Jev API: the studio's `/v1/systemone` takes depends_on, ask_if and alone
and answers a question not asked with `null` and its skip record; JevAPIEngine reads that back into the
same Decision as in-process; the stand-in vLLM server refuses the fields, as vLLM does."""

import httpx
import pytest
from fastapi import FastAPI

from diffjev import Schema, read
from diffjev.api import jev_router
from diffjev.engines import JevAPIEngine
from conftest import STATES, LocalServer

QUESTIONS = {
    "urgent": {"type": "noul", "instructions": "Does the customer need a reply within the hour?"},
    "outage": {"type": "noul", "instructions": "Is it an outage?", "ask_if": {"urgent": "yes"}},
    "calm": {"type": "noul", "instructions": "Is the customer calm?", "ask_if": {"urgent": ["no"]}, "alone": True},
}


@pytest.fixture(scope="module")
def studio_api(dgemma_engine):
    app = FastAPI()
    app.include_router(jev_router(lambda: dgemma_engine))
    with LocalServer(app) as server:
        yield server


def post(server, body):
    return httpx.post(f"{server.url}/v1/systemone", json=body, timeout=60)


def test_a_question_not_asked_is_null_with_why(studio_api, dgemma_engine):
    response = post(studio_api, {"state": STATES[0], "questions": QUESTIONS})
    assert response.status_code == 200
    data = response.json()
    was = "yes" if data["answers"]["urgent"]["noul"] >= 0.5 else "no"
    asked, skipped = ("outage", "calm") if was == "yes" else ("calm", "outage")
    assert data["answers"][skipped] is None and data["answers"][asked]["type"] == "noul"
    assert data["diagnostics"]["skipped"] == {
        skipped: {"because": "urgent", "was": was, "wanted": ["no" if was == "yes" else "yes"]}
    }
    # The same read as in-process, through the engine the studio serves with.
    schema = Schema.from_dict({"questions": QUESTIONS, "samples": 1})
    local = read(schema, STATES[0], dgemma_engine)
    assert data["answers"][asked]["noul"] == pytest.approx(local.answers[asked].probabilities["yes"], abs=1e-5)


def test_jev_engine_reads_the_skip_back(studio_api, dgemma_engine):
    schema = Schema.from_dict({"questions": QUESTIONS, "samples": 1})
    engine = JevAPIEngine(studio_api.url)
    try:
        body = engine.request_body(schema, STATES[1])
        assert body["questions"]["calm"]["ask_if"] == {"urgent": ["no"]} and body["questions"]["calm"]["alone"]
        remote = read(schema, STATES[1], engine)
    finally:
        engine.close()
    local = read(schema, STATES[1], dgemma_engine)
    assert set(remote.answers) == set(local.answers)
    assert remote.diagnostics["skipped"] == local.diagnostics["skipped"]


def test_a_cycle_is_a_400_naming_the_question_and_field(studio_api):
    questions = {**QUESTIONS, "urgent": {**QUESTIONS["urgent"], "depends_on": ["outage"]}}
    response = post(studio_api, {"state": STATES[0], "questions": questions})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["message"].startswith("questions.urgent.depends_on: ") and "circle" in error["message"]


def test_the_stand_in_vllm_server_refuses_staging_fields_as_vllm_does(vllm_server):
    response = post(vllm_server, {"state": STATES[0], "questions": QUESTIONS})
    assert response.status_code == 400
    assert "ask_if" in response.json()["error"]["message"]
