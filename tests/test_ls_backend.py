"""The Label Studio ML backend over real HTTP, asked what Label Studio asks, with the tiny DiffusionGemma.

The requests are shaped as Label Studio's own client sends them: label_studio/ml/api_connector.py,
`MLApi.make_predictions` (/predict), `MLApi.setup` (/setup), `MLApi.health` (/health), sent through a
`requests` session with its 'heartex/<version>' User-Agent; tasks as its TaskSimpleSerializer writes them.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
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
from diffjev.cli import open_without_key_warning
from diffjev.services import ls_backend
from diffjev.services.importing import max_item_chars
from diffjev.services.ls_backend import (
    DEFAULT_MAX_TASKS,
    MB,
    create_ls_backend,
    default_max_body_bytes,
    model_answers,
    model_version_of,
)

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
    assert "more than this backend's 5 tasks" in answer.json()["error"]


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


# Hostile and oversized requests: each is answered with one line of JSON, never a bare 500 --------------

DEEP_CONFIG = "<View>" * 5000 + CONFIG + "</View>" * 5000


def one_line_error(answer: requests.Response, status: int) -> str:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/json"
    message = answer.json()["error"]
    assert message and "\n" not in message and "Traceback" not in message
    return message


@pytest.mark.parametrize("route", ["setup", "predict"])
def test_a_label_config_nested_thousands_deep_is_a_400(backend, ls, route):
    body = (
        setup_request(DEEP_CONFIG)
        if route == "setup"
        else predict_request([ls_task(71, {"text": TEXTS[0]})], DEEP_CONFIG)
    )
    message = one_line_error(ls.post(f"{backend.url}/{route}", json=body), 400)
    assert ("schema" if route == "setup" else "label_config") in message
    assert "deep" in message or "depth" in message


@pytest.mark.parametrize("route", ["setup", "predict", "webhook"])
def test_a_json_body_nested_thousands_deep_is_a_400(backend, ls, route):
    headers = {"Content-Type": "application/json"}
    bare = ls.post(f"{backend.url}/{route}", data="[" * 100_000 + "]" * 100_000, headers=headers)
    assert "deep" in one_line_error(bare, 400)
    inside = '{"tasks": [], "label_config": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert "deep" in one_line_error(ls.post(f"{backend.url}/{route}", data=inside, headers=headers), 400)


def test_a_body_that_is_not_a_json_object_says_where(backend, ls):
    headers = {"Content-Type": "application/json"}
    trailing = ls.post(f"{backend.url}/setup", data=b'{"schema": "x"} {', headers=headers)
    assert "character 16" in one_line_error(trailing, 400)
    listed = ls.post(f"{backend.url}/setup", data=b"[1, 2]", headers=headers)
    assert "JSON object" in one_line_error(listed, 400)
    latin1 = ls.post(f"{backend.url}/setup", data='{"schema": "caf\u00e9"}'.encode("latin-1"), headers=headers)
    assert "UTF-8" in one_line_error(latin1, 400)


def test_a_body_parses_as_json_loads_would(backend, ls, dgemma_engine):
    """Spacing, escapes and a repeated member name: the last one wins, as with json.loads."""
    body = '\ufeff {\n "schema" : 5 ,"schema":\t' + json.dumps(CONFIG) + ' , "project": {"a": [1, {}]} }\r\n'
    answer = ls.post(f"{backend.url}/setup", data=body.encode(), headers={"Content-Type": "application/json"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["model_version"] == model_version_of(dgemma_engine)


def test_an_unexpected_failure_is_a_500_json_line_logged_once(dgemma_engine, ls, monkeypatch, caplog):
    def broken_read(*args, **kwargs):
        raise ZeroDivisionError("a fault\nover two lines")

    monkeypatch.setattr(ls_backend, "read_many", broken_read)
    with LocalServer(create_ls_backend(dgemma_engine)) as server, caplog.at_level(logging.ERROR):
        answer = ls.post(f"{server.url}/predict", json=predict_request([ls_task(81, {"text": TEXTS[0]})]))
        message = one_line_error(answer, 500)
        assert "/predict" in message and "ZeroDivisionError: a fault" in message
        assert ls.get(f"{server.url}/health").status_code == 200  # the server goes on serving
    logged = [record for record in caplog.records if record.exc_info]
    assert len(logged) == 1
    assert logged[0].name == "diffjev.services.ls_backend" and "/predict" in logged[0].getMessage()


def test_a_body_declared_past_the_cap_is_refused_before_it_is_read(dgemma_engine):
    """A 200 MB Content-Length gets its 413 while not a byte of the body has been sent."""
    with LocalServer(create_ls_backend(dgemma_engine, api_key="k", max_body_bytes=MB)) as server:
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        connection.putrequest("POST", "/predict")
        connection.putheader("Authorization", "Bearer k")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(200 * MB))
        connection.endheaders()
        answer = connection.getresponse()
        assert answer.status == 413
        message = json.loads(answer.read())["error"]
        connection.close()
    assert "1.0 MB" in message and "--max-body-mb" in message and "\n" not in message


def test_a_chunked_body_stops_being_read_once_past_the_cap(dgemma_engine):
    """A body without a length, sent forever: the backend reads a little past the cap and answers 413."""
    app = create_ls_backend(dgemma_engine, max_body_bytes=MB)
    chunk = b"[" + b" " * (64 * 1024 - 1)
    received, sent = [], []

    async def receive():
        received.append(len(chunk))
        return {"type": "http.request", "body": chunk, "more_body": True}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/predict",
        "raw_path": b"/predict",
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"transfer-encoding", b"chunked")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 9090),
    }
    asyncio.run(asyncio.wait_for(app(scope, receive, send), timeout=30))
    assert sent[0]["status"] == 413
    assert "--max-body-mb" in json.loads(b"".join(m.get("body", b"") for m in sent[1:]))["error"]
    assert MB < sum(received) <= MB + 2 * len(chunk)


def test_too_many_tasks_are_refused_before_the_rest_are_parsed(backend, ls):
    """The sixth task of a backend taking five ends the parse: what follows it is never read."""

    def body_then_garbage(count: int) -> str:
        tasks = ",".join(json.dumps(ls_task(90 + n, {"text": TEXTS[0]})) for n in range(count))
        return '{"label_config": ' + json.dumps(CONFIG) + ', "tasks": [' + tasks + " not json at all"

    headers = {"Content-Type": "application/json"}
    six = one_line_error(ls.post(f"{backend.url}/predict", data=body_then_garbage(6), headers=headers), 413)
    assert "more than this backend's 5 tasks" in six and "--max-tasks" in six
    five = one_line_error(ls.post(f"{backend.url}/predict", data=body_then_garbage(5), headers=headers), 400)
    assert "not JSON" in five


def test_two_million_tasks_under_the_default_body_cap_are_refused_by_count(dgemma_engine, ls):
    with LocalServer(create_ls_backend(dgemma_engine)) as server:
        body = '{"tasks": [' + ",".join(['{"data": {"text": "a"}}'] * 2_000_000) + '], "label_config": "x"}'
        assert len(body) < default_max_body_bytes(DEFAULT_MAX_TASKS, max_item_chars())
        answer = ls.post(f"{server.url}/predict", data=body, headers={"Content-Type": "application/json"})
    assert "more than this backend's 100 tasks" in one_line_error(answer, 413)


def test_the_default_body_cap_takes_a_full_request_of_escaped_texts_at_the_item_cap(dgemma_engine, ls):
    """Label Studio's client escapes each non-ASCII character to six bytes; tasks as long as the item
    cap allows, as many as the backend takes, still fit. (The text is under a key the config does not
    read, so each gets its empty prediction without a model read.)"""
    with LocalServer(create_ls_backend(dgemma_engine, max_tasks=3, max_chars=2000)) as server:
        tasks = [ls_task(100 + n, {"body": "\u00e9" * 2000}) for n in range(3)]
        answer = ls.post(f"{server.url}/predict", json=predict_request(tasks))
        assert answer.status_code == 200, answer.text
        assert [result["result"] for result in answer.json()["results"]] == [[], [], []]
        over = ls.post(f"{server.url}/predict", json=predict_request(tasks, CONFIG + " " * 3 * MB))
    assert one_line_error(over, 413)


@pytest.mark.parametrize(
    ("host", "api_key", "warned"),
    [
        ("127.0.0.1", None, False),
        ("localhost", None, False),
        ("::1", None, False),
        ("0.0.0.0", "k", False),
        ("0.0.0.0", None, True),
        ("::", None, True),
        ("10.1.2.3", None, True),
        ("gpu-host", None, True),
    ],
)
def test_listening_beyond_this_machine_without_a_key_is_warned(host, api_key, warned):
    warning = open_without_key_warning(host, api_key)
    assert (warning is not None) == warned
    if warned:
        assert host in warning and "--api-key" in warning and "\n" not in warning


def test_the_command_warns_first_when_it_answers_anyone_on_the_network(tiny_model_folder):
    """192.0.2.1 (a documentation address) is on no interface, so nothing is ever exposed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "diffjev.cli", "serve-ls-backend", "--engine", "transformers"]
    command += ["--model", str(tiny_model_folder), "--host", "192.0.2.1", "--port", str(free_port())]
    env.pop("DIFFJEV_LS_BACKEND_API_KEY", None)
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        first = process.stderr.readline()
    finally:
        process.terminate()
        process.wait(timeout=20)
    assert first.startswith("# warning: listening on 192.0.2.1 without an API key")


def test_the_model_version_is_one_token_even_for_the_offline_models_name(causal_lm, tokenizer, dgemma_engine):
    """Label Studio lists and filters predictions by model_version: `diffjev-<engine>-<model>` with no space
    or parenthesis, though the offline model's name says which package it came from."""
    from diffjev.engines.autoregressive import AutoregressiveEngine
    from diffjev.models import OFFLINE_GEMMA

    offline = AutoregressiveEngine(causal_lm, tokenizer, mode="options")
    offline.model_name = OFFLINE_GEMMA  # as AutoregressiveEngine.offline names it
    assert model_version_of(offline) == "diffjev-autoregressive-options-gemma3-270m"
    served = AutoregressiveEngine(causal_lm, tokenizer)
    served.model_name = "google/gemma-3-270m it"
    assert model_version_of(served) == "diffjev-autoregressive-single-google-gemma-3-270m-it"
    for engine in (offline, served, dgemma_engine):
        assert all(c.isalnum() or c in "._-" for c in model_version_of(engine)), model_version_of(engine)


def test_the_commands_help_names_every_route_label_studio_calls():
    shown = subprocess.run(
        [sys.executable, "-m", "diffjev.cli", "serve-ls-backend", "--help"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"},
        timeout=120,
    )
    assert shown.returncode == 0, shown.stderr
    assert "(/health, /setup, /predict, /webhook)" in " ".join(shown.stdout.split())
