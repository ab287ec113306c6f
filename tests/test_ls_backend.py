"""The Label Studio ML backend over real HTTP, asked what Label Studio asks, with the tiny DiffusionGemma.

The requests are shaped as Label Studio's own client sends them: label_studio/ml/api_connector.py,
`MLApi.make_predictions` (/predict), `MLApi.setup` (/setup), `MLApi.health` (/health), sent through a
`requests` session with its 'heartex/<version>' User-Agent; tasks as its TaskSimpleSerializer writes them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from conftest import LocalServer, free_port

from diffjev.formats.labelstudio import schema_from_config, task_predictions
from diffjev.read import read_many
from diffjev.services.ls_backend import create_ls_backend, model_answers, model_version_of

ROOT = Path(__file__).resolve().parents[1]

CONFIG = """<View>
  <Text name="text" value="$text"/>
  <Choices name="team" toName="text" choice="single">
    <Choice value="billing"/>
    <Choice value="technical"/>
    <Choice value="account"/>
  </Choices>
  <Choices name="topics" toName="text" choice="multiple">
    <Choice value="outage"/>
    <Choice value="invoice"/>
  </Choices>
  <Rating name="upset" toName="text" maxRating="3"/>
  <Labels name="ner" toName="text">
    <Label value="PRODUCT"/>
  </Labels>
</View>"""

LABELS = {"team": {"billing", "technical", "account"}, "topics": {"outage", "invoice"}, "ner": {"PRODUCT"}}
KINDS = {"team": "choices", "topics": "choices", "upset": "rating", "ner": "labels"}

TEXTS = [
    "Everything is down and we have a demo at noon.",
    "I was charged twice for the March invoice.",
]

HEADERS = {"User-Agent": "heartex/1.13.1"}  # BaseHTTPAPI.HEADERS


def ls_task(task_id: int, data: dict) -> dict:
    """A task as Label Studio's TaskSimpleSerializer sends it to /predict."""
    return {
        "id": task_id,
        "data": data,
        "meta": {},
        "created_at": "2026-01-05T10:00:00.000000Z",
        "updated_at": "2026-01-05T10:00:00.000000Z",
        "is_labeled": False,
        "overlap": 1,
        "inner_id": task_id,
        "total_annotations": 0,
        "cancelled_annotations": 0,
        "total_predictions": 0,
        "project": 3,
        "file_upload": None,
        "annotations": [],
        "predictions": [],
    }


def predict_request(tasks: list[dict], label_config: str = CONFIG) -> dict:
    """MLApi.make_predictions's body."""
    return {
        "tasks": tasks,
        "model_version": "",
        "project": "3.1767607200",
        "label_config": label_config,
        "params": {"login": None, "password": None, "context": None},
    }


def setup_request(label_config: str = CONFIG) -> dict:
    """MLApi.setup's body."""
    return {
        "project": "3.1767607200",
        "schema": label_config,
        "hostname": "http://localhost:8080",
        "access_token": "0123456789abcdef",
    }


@pytest.fixture(scope="module")
def backend(dgemma_engine):
    with LocalServer(create_ls_backend(dgemma_engine, max_tasks=5)) as server:
        yield server


@pytest.fixture
def ls():
    with requests.Session() as session:
        session.headers.update(HEADERS)
        yield session


def check_prediction(prediction: dict, text: str, model_version: str) -> None:
    """A prediction Label Studio stores as it is: every result names a control of the config, on its
    object, with a value the control allows."""
    assert prediction["model_version"] == model_version
    assert 0.0 <= prediction["score"] <= 1.0
    seen = set()
    for result in prediction["result"]:
        name = result["from_name"]
        seen.add(name)
        assert result["to_name"] == "text"
        assert result["type"] == KINDS[name]
        value = result["value"]
        if name == "upset":
            assert value["rating"] in (1, 2, 3)
        elif name == "ner":
            assert set(value["labels"]) <= LABELS["ner"]
            assert 0 <= value["start"] < value["end"] <= len(text)
            assert text[value["start"] : value["end"]] == value["text"]
        else:
            assert set(value["choices"]) <= LABELS[name]
        if name == "team":
            assert len(value["choices"]) == 1
        for key in ("score",):
            if key in result:
                assert 0.0 <= result[key] <= 1.0
        distribution = (result.get("meta") or {}).get("distribution")
        if name in ("team", "upset"):
            assert distribution is not None, result
            assert abs(sum(distribution.values()) - 1.0) < 1e-6
            assert set(distribution) == (LABELS.get(name) or {"1", "2", "3"})
        if name == "topics":  # one P(yes) per label of the multi-label question
            assert set(distribution) == LABELS["topics"]
            assert all(0.0 <= p <= 1.0 for p in distribution.values())
    assert {"team", "upset"} <= seen


def test_health_metrics_and_versions(backend, ls, dgemma_engine):
    health = ls.get(f"{backend.url}/health")
    assert health.status_code == 200
    assert health.json()["status"] == "UP"
    assert health.json()["model_class"] == "diffjev"
    assert ls.get(f"{backend.url}/").json()["status"] == "UP"
    assert ls.get(f"{backend.url}/metrics").json() == {}
    assert ls.get(f"{backend.url}/versions").json()["versions"] == [model_version_of(dgemma_engine)]


def test_setup_answers_the_model_version(backend, ls, dgemma_engine):
    answer = ls.post(f"{backend.url}/setup", json=setup_request())
    assert answer.status_code == 200
    version = answer.json()["model_version"]
    assert version == model_version_of(dgemma_engine) == f"diffjev-transformers-{dgemma_engine.model_name}"


def test_predict_gives_one_valid_prediction_per_task_equal_to_an_in_process_read(backend, ls, dgemma_engine):
    tasks = [ls_task(11, {"text": TEXTS[0]}), ls_task(12, {"text": TEXTS[1], "source": "mail"})]
    answer = ls.post(f"{backend.url}/predict", json=predict_request(tasks))
    assert answer.status_code == 200, answer.text
    results = answer.json()["results"]
    version = model_version_of(dgemma_engine)
    assert len(results) == 2
    for prediction, text in zip(results, TEXTS):
        check_prediction(prediction, text, version)

    config = schema_from_config(CONFIG)
    here = [
        task_predictions(config, model_answers(decision), version, text)
        for decision, text in zip(read_many(config.schema, TEXTS, dgemma_engine, seed=42), TEXTS)
    ]
    assert results == here
    again = ls.post(f"{backend.url}/predict", json=predict_request(tasks)).json()["results"]
    assert again == results


def test_a_task_without_its_text_gets_an_empty_prediction_saying_why(backend, ls, dgemma_engine):
    tasks = [ls_task(21, {"body": "the text is under another key"}), ls_task(22, {"text": TEXTS[1]})]
    results = ls.post(f"{backend.url}/predict", json=predict_request(tasks)).json()["results"]
    assert len(results) == 2
    empty, read = results
    assert empty["result"] == []
    assert "task 21" in empty["error"] and "data.text" in empty["error"]
    assert empty["model_version"] == model_version_of(dgemma_engine)
    check_prediction(read, TEXTS[1], model_version_of(dgemma_engine))


def test_a_text_past_the_item_cap_gets_that_tasks_error(dgemma_engine, ls, monkeypatch):
    monkeypatch.setenv("DIFFJEV_MAX_ITEM_CHARS", "44")
    with LocalServer(create_ls_backend(dgemma_engine)) as server:
        tasks = [ls_task(31, {"text": TEXTS[0]}), ls_task(32, {"text": TEXTS[1]})]  # 46 and 42 characters
        results = ls.post(f"{server.url}/predict", json=predict_request(tasks)).json()["results"]
    assert results[0]["result"] == []
    assert "task 31" in results[0]["error"] and "46 characters" in results[0]["error"]
    assert "44" in results[0]["error"]
    assert "error" not in results[1] and results[1]["result"]


def test_too_many_tasks_are_refused_whole(backend, ls):
    tasks = [ls_task(40 + n, {"text": TEXTS[0]}) for n in range(6)]
    answer = ls.post(f"{backend.url}/predict", json=predict_request(tasks))
    assert answer.status_code == 413
    assert "6 tasks" in answer.json()["error"] and "5" in answer.json()["error"]


@pytest.mark.parametrize("route", ["setup", "predict"])
def test_a_tag_diffjev_cannot_hold_is_a_clear_400_naming_it(backend, ls, route):
    config = CONFIG.replace("</View>", '<TextArea name="summary" toName="text"/></View>')
    body = setup_request(config) if route == "setup" else predict_request([ls_task(51, {"text": TEXTS[0]})], config)
    answer = ls.post(f"{backend.url}/{route}", json=body)
    assert answer.status_code == 400
    message = answer.json()["error"]
    assert "TextArea" in message
    assert "\n" not in message


def test_a_body_without_a_config_or_tasks_is_refused_naming_the_field(backend, ls):
    no_config = ls.post(f"{backend.url}/predict", json={"tasks": [ls_task(1, {"text": TEXTS[0]})]})
    assert no_config.status_code == 400 and "label_config" in no_config.json()["error"]
    no_tasks = ls.post(f"{backend.url}/predict", json={"label_config": CONFIG})
    assert no_tasks.status_code == 400 and "tasks" in no_tasks.json()["error"]
    not_json = ls.post(f"{backend.url}/setup", data=b"<View/>", headers={"Content-Type": "application/json"})
    assert not_json.status_code == 400 and "JSON" in not_json.json()["error"]


def test_webhook_events_are_answered_without_training(backend, ls):
    event = {"action": "ANNOTATION_CREATED", "project": {"id": 3, "label_config": CONFIG}, "annotation": {}}
    answer = ls.post(f"{backend.url}/webhook", json=event)
    assert answer.status_code == 200
    assert answer.json()["status"] == "ignored"


def test_with_an_api_key_only_label_studios_basic_auth_or_the_bearer_key_gets_in(dgemma_engine, ls):
    with LocalServer(create_ls_backend(dgemma_engine, api_key="s3cret")) as server:
        refused = ls.get(f"{server.url}/health")
        assert refused.status_code == 401
        assert "Basic" in refused.headers["WWW-Authenticate"]
        assert ls.get(f"{server.url}/health", auth=("labelstudio", "wrong")).status_code == 401
        assert ls.post(f"{server.url}/setup", json=setup_request(), auth=("x", "s3cretx")).status_code == 401
        assert ls.get(f"{server.url}/health", headers={"Authorization": "Basic not-base64!"}).status_code == 401
        # The connection's Basic Authentication: basic_auth_user / basic_auth_pass on its requests session.
        assert ls.get(f"{server.url}/health", auth=("labelstudio", "s3cret")).status_code == 200
        setup = ls.post(f"{server.url}/setup", json=setup_request(), auth=("labelstudio", "s3cret"))
        assert setup.status_code == 200
        bearer = ls.get(f"{server.url}/health", headers={"Authorization": "Bearer s3cret"})
        assert bearer.status_code == 200


def test_the_command_serves_the_backend(tiny_model_folder, ls):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "diffjev.cli", "serve-ls-backend", "--engine", "transformers"]
    command += ["--model", str(tiny_model_folder), "--port", str(port), "--api-key", "k3y"]
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, process.stderr.read()
            try:
                health = ls.get(f"http://127.0.0.1:{port}/health", auth=("ls", "k3y"), timeout=2)
                break
            except requests.ConnectionError:
                assert time.monotonic() < deadline, "the backend did not start"
                time.sleep(0.2)
        assert health.json()["status"] == "UP"
        results = ls.post(
            f"http://127.0.0.1:{port}/predict",
            json=predict_request([ls_task(61, {"text": TEXTS[1]})]),
            auth=("ls", "k3y"),
        ).json()["results"]
        check_prediction(results[0], TEXTS[1], health.json()["model_version"])
    finally:
        process.terminate()
        process.wait(timeout=20)
    assert "diffjev-transformers-" in process.stderr.read()
