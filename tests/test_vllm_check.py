"""diffjev's wire traffic against vLLM 0.33's own pydantic models (`scripts/check-vllm`, the real `vllm`
package in an environment of its own). A recording proxy sits between diffjev's clients and serve-model,
so the samples are the bodies the clients really sent and the answers the server really gave; the studio's
own `/v1/systemone` answers and refusals are checked the same way."""

import json
import subprocess
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from diffjev.canvas import THOUGHT_BLOCK
from diffjev.engines.jev_api import JevAPIEngine
from diffjev.engines.vllm import VLLMServerEngine
from diffjev.read import read_many
from conftest import SERVED_NAME, STATES, LocalServer
from studio_fixtures import serve_studio, studio_db

ROOT = Path(__file__).resolve().parents[1]
SERVED_WIDTH = 64  # conftest's vllm_server
KINDS = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completion",
    "/v1/systemone": "systemone",
    "/v1/decisions": "decisions",
}


class Recorder:
    """A proxy that forwards every request to `upstream` and keeps each JSON body and answer as samples."""

    def __init__(self, upstream: str, vocab_size: int):
        self.upstream, self.vocab_size, self.samples = upstream, vocab_size, []

    def sample(self, kind: str, name: str, body) -> dict:
        return {"kind": kind, "name": name, "body": body, "canvas_length": SERVED_WIDTH, "vocab_size": self.vocab_size}

    def keep(self, path: str, name: str, sent, status: int, answer) -> None:
        kind = KINDS.get(path)
        if kind is None:
            return
        if sent is not None:
            self.samples.append(self.sample(f"{kind}_request", name, sent))
        self.samples.append(self.sample(f"{kind}_response" if status == 200 else "error_response", name, answer))

    def app(self) -> Starlette:
        async def forward(request: Request) -> Response:
            raw = await request.body()
            async with httpx.AsyncClient(timeout=60) as client:
                answer = await client.request(
                    request.method,
                    f"{self.upstream}{request.url.path}",
                    content=raw,
                    headers={"content-type": "application/json"},
                )
            self.keep(request.url.path, "client", json.loads(raw) if raw else None, answer.status_code, answer.json())
            return Response(answer.content, answer.status_code, media_type="application/json")

        return Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST"])])


def run_check(samples: list[dict], folder: Path) -> subprocess.CompletedProcess:
    path = folder / "samples.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in samples))
    return subprocess.run(
        [str(ROOT / "scripts" / "check-vllm"), str(path)], capture_output=True, text=True, timeout=1800
    )


@pytest.fixture(scope="module")
def recorded(vllm_server, dgemma_engine, schema, tokenizer):
    """Samples of every read diffjev's vLLM clients make, through the proxy, and of the refusals."""
    recorder = Recorder(vllm_server.url, dgemma_engine.builder.format.vocab_size)
    with LocalServer(recorder.app()) as proxy:
        chat = VLLMServerEngine(proxy.url, model=SERVED_NAME, tokenizer=tokenizer, max_in_flight=2)
        list(read_many(schema, STATES[:2], chat))
        chat.close()
        batched = VLLMServerEngine(
            proxy.url, model=SERVED_NAME, tokenizer=tokenizer, max_in_flight=4, reads_per_request=4
        )
        list(read_many(schema, STATES, batched))
        batched.close()
        for api in ("systemone", "decisions"):
            for joint in (True, False):
                engine = JevAPIEngine(proxy.url, model=SERVED_NAME, api=api, joint=joint)
                list(read_many(schema, STATES[:2], engine))
                engine.close()
        first_chat = next(s["body"] for s in recorder.samples if s["kind"] == "chat_request")
        # The thought block as the client ends a prompt with it (diffjev.canvas): a continued assistant message.
        continued = {
            **first_chat,
            "messages": [*first_chat["messages"], {"role": "assistant", "content": THOUGHT_BLOCK}],
            "continue_final_message": True,
            "add_generation_prompt": False,
        }
        assert httpx.post(f"{proxy.url}/v1/chat/completions", json=continued, timeout=60).status_code == 200
    # Refusals, straight from serve-model: each must be vLLM's ErrorResponse.
    first_jev = next(s["body"] for s in recorder.samples if s["kind"] == "systemone_request")
    first_completion = next(s["body"] for s in recorder.samples if s["kind"] == "completion_request")
    refused = [
        ("/v1/completions", {**first_completion, "logprobs": None}),
        ("/v1/completions", {**first_completion, "prompt": "text"}),
        ("/v1/chat/completions", {**first_chat, "temperature": 0.5}),
        ("/v1/chat/completions", {**first_chat, "model": "other"}),
        ("/v1/systemone", {**first_jev, "joint": 1}),
        ("/v1/systemone", {**first_jev, "questions": {"q": {"type": "rating"}}}),
        ("/v1/decisions", {"model": SERVED_NAME, "input": "x", "questions": []}),
    ]
    for path, body in refused:
        answer = httpx.post(f"{vllm_server.url}{path}", json=body, timeout=30)
        assert answer.status_code in (400, 404), answer.text
        recorder.keep(path, f"refused {path}", None, answer.status_code, answer.json())
    return recorder


def test_what_diffjev_sends_and_serves_passes_vllms_own_models(recorded, tmp_path):
    kinds = {s["kind"] for s in recorded.samples}
    assert kinds == {
        "chat_request",
        "chat_response",
        "completion_request",
        "completion_response",
        "systemone_request",
        "systemone_response",
        "decisions_request",
        "decisions_response",
        "error_response",
    }
    assert any(s["body"].get("joint") is True for s in recorded.samples if s["kind"] == "systemone_request")
    assert any(s["body"].get("continue_final_message") for s in recorded.samples if s["kind"] == "chat_request")
    assert any(len(s["body"]["prompt"]) > 1 for s in recorded.samples if s["kind"] == "completion_request")
    result = run_check(recorded.samples, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"vllm 0.33.0: {len(recorded.samples)} of {len(recorded.samples)} samples pass" in result.stdout
    print(result.stdout.strip().splitlines()[-1])  # the README quotes this line


def test_the_studios_jev_api_answers_and_refuses_in_vllms_shapes(tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "check.db", ["one"])
    server, _ = serve_studio(db, dgemma_engine)
    body = {
        "state": "The export is broken.",
        "questions": {
            "urgent": {"type": "noul", "instructions": "Urgent?"},
            "team": {"type": "choice", "instructions": "Team?", "criteria": {"billing": None, "tech": "bugs"}},
        },
    }
    samples = []
    with server:
        for change in ({}, {"joint": True}, {"joint": 1}, {"questions": {"q": {"type": "bool"}}}, {"extra": 1}):
            answer = httpx.post(f"{server.url}/v1/systemone", json={**body, **change}, timeout=60)
            kind = "systemone_response" if answer.status_code == 200 else "error_response"
            samples.append({"kind": kind, "name": f"studio {change}", "body": answer.json()})
    assert [s["kind"] for s in samples].count("error_response") == 3
    result = run_check(samples, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_check_fails_what_vllm_would_refuse(recorded, tmp_path):
    """The check can fail: a joint that is not a bool, an answer with a field vLLM's model lacks, and a read
    whose seed canvas is not its width are each named."""
    request = next(s for s in recorded.samples if s["kind"] == "systemone_request")
    answer = next(s for s in recorded.samples if s["kind"] == "systemone_response")
    chat = next(s for s in recorded.samples if s["kind"] == "chat_request")
    xargs = {
        **chat["body"]["vllm_xargs"],
        "diffusion_seed_canvas": chat["body"]["vllm_xargs"]["diffusion_seed_canvas"][:-1],
    }
    bad = [
        {**request, "name": "joint 1", "body": {**request["body"], "joint": 1}},
        {**answer, "name": "extra", "body": {**answer["body"], "sd_note": "x"}},
        {**chat, "name": "short seed", "body": {**chat["body"], "vllm_xargs": xargs}},
    ]
    result = run_check(bad, tmp_path)
    assert result.returncode == 1
    failing = [line for line in result.stdout.splitlines() if line.startswith("FAIL")]
    assert len(failing) == 3, result.stdout
    assert "joint" in failing[0] and "sd_note" in failing[1] and "diffusion_seed_canvas" in failing[2]
