"""`diffjev serve-model --api-key`: every route of the served model answers only the key, as vLLM's
--api-key does; through the real app over HTTP, diffjev's own client, and the command line as a process."""

import os
import subprocess
import sys
import time

import httpx
import pytest

from diffjev import read
from diffjev.engines import VLLMServerEngine
from diffjev.engines.base import EngineError
from conftest import LocalServer, SERVED_NAME, free_port

KEY = "sk-serve-model-KEY-7"
ROUTES = [
    ("GET", "/v1/models"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/systemone"),
    ("GET", "/docs"),
    ("GET", "/openapi.json"),
    ("GET", "/redoc"),
    ("GET", "/no-such-route"),
]
WRONG = [None, "", "Bearer", f"Bearer {KEY}x", f"Bearer {KEY[:-1]}", KEY, f"Basic {KEY}", f"bearer  {KEY}"]


@pytest.fixture(scope="module")
def keyed(dgemma_engine):
    from diffjev.serve import create_app

    with LocalServer(create_app(dgemma_engine, SERVED_NAME, canvas_length=64, api_key=KEY)) as server:
        yield server


def test_every_route_refuses_a_missing_or_wrong_key_with_a_401(keyed):
    with httpx.Client(base_url=keyed.url, timeout=30) as http:
        for method, path in ROUTES:
            for header in WRONG:
                headers = {} if header is None else {"Authorization": header}
                answer = http.request(method, path, headers=headers, json={})
                assert answer.status_code == 401, (method, path, header)
                assert "API key" in answer.json()["error"]["message"]
        right = {"Authorization": f"Bearer {KEY}"}
        assert http.get("/v1/models", headers=right).json()["data"][0]["id"] == SERVED_NAME
        assert http.post("/v1/systemone", headers=right, json={}).status_code == 400  # past the key: the body


def test_the_client_reads_with_the_key_and_says_what_is_wrong_without_it(keyed, tokenizer, schema):
    engine = VLLMServerEngine(keyed.url, SERVED_NAME, tokenizer, canvas_length=64, api_key=KEY)
    assert set(read(schema, "Everything is down.", engine).answers) == {"urgent", "team", "tone"}
    engine.close()
    keyless = VLLMServerEngine(keyed.url, SERVED_NAME, tokenizer, canvas_length=64)
    with pytest.raises(EngineError, match="answered 401 \\(Unauthorized\\); check the API key"):
        read(schema, "Everything is down.", keyless)
    keyless.close()


def test_serve_model_takes_the_key_from_vllm_api_key_and_passes_it_to_vllm(tokenizer):
    port = free_port()
    env = {**os.environ, "VLLM_API_KEY": KEY, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "diffjev.cli", "serve-model", "--tiny", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=env,
    )
    url = f"http://127.0.0.1:{port}/v1/models"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                status = httpx.get(url, timeout=2).status_code
                break
            except httpx.HTTPError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read().decode()[-2000:]
                time.sleep(0.3)
        assert status == 401
        assert httpx.get(url, headers={"Authorization": f"Bearer {KEY}"}, timeout=10).status_code == 200
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    dry = subprocess.run(
        [sys.executable, "-m", "diffjev.cli", "serve-model", "--model", "google/dg", "--api-key", KEY, "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert dry.returncode == 0 and "--api-key" in dry.stdout and KEY not in dry.stdout, dry.stdout


def test_vllm_command_carries_the_key():
    from diffjev.cli import parser, vllm_command

    command = vllm_command(parser().parse_args(["serve-model", "--model", "google/dg", "--api-key", KEY]))
    assert command[command.index("--api-key") + 1] == KEY
