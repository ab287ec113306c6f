"""Reads several to a request: VLLMServerEngine with `reads_per_request` sends text reads that share a
canvas as one `/v1/completions` request (the prompts as token ids), over real HTTP against serve-model and
the tiny DiffusionGemma; the answers equal one chat completion per read, and the server reads, refuses and
answers completions as vLLM does."""

import httpx
import pytest

from diffjev import EngineError, Schema, read_many
from diffjev.engines import VLLMServerEngine
from conftest import SERVED_NAME, STATES, TICKETS
from faulty_servers import CannedFault


class Recorded(httpx.HTTPTransport):
    """httpx's own transport, noting each request's path and body on the way."""

    sent: list = []

    def handle_request(self, request):
        Recorded.sent.append((request.url.path, request.content))
        return super().handle_request(request)


def engine(url, tokenizer, **options):
    return VLLMServerEngine(url, model=SERVED_NAME, tokenizer=tokenizer, **options)


@pytest.fixture
def recorded(monkeypatch):
    Recorded.sent = []
    original = httpx.Client.__init__

    def with_recorder(self, *args, **kwargs):
        original(self, *args, **{**kwargs, "transport": Recorded()})

    monkeypatch.setattr(httpx.Client, "__init__", with_recorder)
    return Recorded.sent


def test_reads_in_one_request_equal_one_chat_read_each(vllm_server, tokenizer, schema, recorded):
    custom = Schema.from_dict({**TICKETS, "template": "Urgent: {urgent}\nTeam: {team}\nTone: {tone}/3"})
    states = [*STATES, *(f"{s} (again {i})" for i, s in enumerate(STATES * 3))]
    one_each, batched = engine(vllm_server.url, tokenizer, max_in_flight=8), None
    try:
        batched = engine(vllm_server.url, tokenizer, max_in_flight=8, reads_per_request=4)
        for s in (schema, custom):
            recorded.clear()
            alone = list(read_many(s, states, one_each))
            reads = [path for path, _ in recorded if path != "/v1/models"]
            assert set(reads) == {"/v1/chat/completions"}
            recorded.clear()
            together = list(read_many(s, states, batched))
            paths = [path for path, _ in recorded if path != "/v1/models"]
            assert set(paths) == {"/v1/completions"} and len(paths) < len(reads)
            for a, b in zip(alone, together):
                assert b.diagnostics["canvas_ids"] == a.diagnostics["canvas_ids"]
                assert b.diagnostics["prompt_ids"] == a.diagnostics["prompt_ids"]
                assert b.diagnostics["draws"] == a.diagnostics["draws"]
                for qid, answer in a.answers.items():
                    other = b.answers[qid]
                    assert other.answer == answer.answer and other.argmax_is_label == answer.argmax_is_label
                    for name, p in answer.probabilities.items():
                        assert other.probabilities[name] == pytest.approx(p, abs=1e-5)
    finally:
        one_each.close()
        batched and batched.close()


def test_a_request_carries_at_most_reads_per_request_prompts_and_one_canvas(vllm_server, tokenizer, schema, recorded):
    import orjson

    batched = engine(vllm_server.url, tokenizer, max_in_flight=6, reads_per_request=3)
    try:
        list(read_many(schema, [f"ticket {i}: the export fails" for i in range(10)], batched))
    finally:
        batched.close()
    bodies = [orjson.loads(body) for path, body in recorded if path == "/v1/completions"]
    assert all(1 <= len(b["prompt"]) <= 3 for b in bodies)
    assert sum(len(b["prompt"]) for b in bodies) >= 10  # the "auto" policy may read an item again
    first = bodies[0]
    assert first["vllm_xargs"]["diffusion_read_only"] is True and len(first["vllm_xargs"]["diffusion_seed_canvas"])
    assert "temperature" not in first and "seed" not in first and "messages" not in first
    assert first["logprob_token_ids"] == sorted(first["logprob_token_ids"])


def completion(server, **changes):
    return httpx.post(f"{server.url}/v1/completions", json=completion_body(**changes), timeout=60)


def completion_body(**changes):
    body = {
        "model": SERVED_NAME,
        "prompt": [[2, 106, 1645, 108], [2, 106, 9259, 108]],
        "max_tokens": 16,
        "logprobs": 5,
        "logprob_token_ids": [3, 17, 2000],
        "return_tokens_as_token_ids": True,
        "vllm_xargs": {
            "diffusion_seed_canvas": [7] * 16,
            "diffusion_canvas_length": 16,
            "diffusion_max_steps": 1,
            "diffusion_read_only": True,
        },
    }
    for key, value in changes.items():
        if value is None:
            body.pop(key, None)
        else:
            body[key] = value
    return body


def test_the_server_answers_a_batch_in_vllms_completions_shape(vllm_server):
    answer = completion(vllm_server)
    assert answer.status_code == 200, answer.text
    data = answer.json()
    assert data["object"] == "text_completion" and [c["index"] for c in data["choices"]] == [0, 1]
    assert data["usage"]["prompt_tokens"] == 8 and data["usage"]["completion_tokens"] == 32
    for choice in data["choices"]:
        logprobs = choice["logprobs"]
        assert len(logprobs["tokens"]) == len(logprobs["top_logprobs"]) == len(logprobs["token_logprobs"]) == 16
        for token, top in zip(logprobs["tokens"], logprobs["top_logprobs"]):
            # the sampled token first, then every asked id (top-k is not asked for beside the ids)
            assert list(top)[0] == token and set(top) >= {"token_id:3", "token_id:17", "token_id:2000"}
            assert len(top) <= 4 and all(v <= 0 for v in top.values())
        assert choice["finish_reason"] == "length"
    # two prompts, two reads: different prompts read differently
    assert data["choices"][0]["logprobs"]["top_logprobs"] != data["choices"][1]["logprobs"]["top_logprobs"]
    single = completion(vllm_server, prompt=[2, 106, 1645, 108]).json()
    assert single["choices"][0]["logprobs"] == data["choices"][0]["logprobs"]


@pytest.mark.parametrize(
    "changes, param",
    [
        ({"prompt": "a text prompt"}, "prompt"),
        ({"prompt": []}, "prompt"),
        ({"prompt": [[1, 2], []]}, "prompt"),
        ({"prompt": [[1, 999999999]]}, "prompt"),
        ({"logprobs": None}, "logprob_token_ids"),
        ({"logprobs": True}, "logprobs"),
        ({"temperature": 0.5}, "temperature"),
        ({"stream": True}, "stream"),
        ({"echo": True}, "echo"),
        ({"n": 2}, "n"),
        ({"n": 1.5}, "n"),  # not an int to pydantic; `true`, 1.0 and "1" are 1 to it, as to vLLM's request model
        ({"prompt_logprobs": 5}, "prompt_logprobs"),
        ({"suffix": "}"}, "suffix"),  # vLLM: FIM rendering only, from text prompts; DiffusionGemma has none
        ({"model": "another"}, "model"),
        ({"vllm_xargs": {"diffusion_seed_canvas": [7] * 16, "diffusion_canvas_length": 16}}, "vllm_xargs"),
    ],
)
def test_the_server_refuses_a_completions_read_as_vllm_does(vllm_server, changes, param):
    answer = completion(vllm_server, **changes)
    assert answer.status_code in (400, 404), answer.text
    assert answer.json()["error"]["param"] == param


def test_the_server_reads_n_as_vllms_pydantic_int(vllm_server):
    for one in (1.0, "1", True):  # each was refused as "one choice per prompt"
        assert completion(vllm_server, n=one).status_code == 200


def test_an_answer_short_of_its_prompts_fails_each_read_by_name(tokenizer, schema):
    # a server answering 200 with one choice for a batch of prompts: the reads fail, none is half-stored
    with CannedFault(200, b'{"choices": [{"index": 0, "logprobs": null}]}') as server:
        batched = engine(server.url, tokenizer, max_in_flight=4, reads_per_request=4, timeout=5)
        try:
            with pytest.raises(EngineError, match="one per prompt"):
                list(read_many(schema, STATES, batched))
        finally:
            batched.close()


def test_reads_per_request_must_be_positive(vllm_server, tokenizer):
    with pytest.raises(ValueError, match="reads_per_request"):
        engine(vllm_server.url, tokenizer, reads_per_request=0)


def test_a_batched_run_stores_what_a_run_of_chat_reads_stores(tmp_path, vllm_server, tokenizer):
    from diffjev.services.prelabel import prelabel
    from test_faults import suggestion_rows
    from test_runs import counts, project_db

    stored = {}
    for per_request in (1, 8):
        db = project_db(tmp_path / f"r{per_request}.db", 30)
        reader = engine(vllm_server.url, tokenizer, max_in_flight=8, reads_per_request=per_request)
        report = prelabel(db, "p", reader, batch_items=8)
        reader.close()
        assert (report.status, report.read, report.failed) == ("completed", 30, 0)
        assert counts(db, report.run_id)[:2] == (30, 90)
        stored[per_request] = suggestion_rows(db, report.run_id)
    assert stored[1] == stored[8]


def test_the_cli_sends_reads_several_to_a_request(tmp_path, vllm_server, tiny_model_folder):
    import subprocess
    import sys

    from test_runs import project_db

    project_db(tmp_path / "cli.db", 10)
    command = [sys.executable, "-m", "diffjev.cli", "prelabel", "--db", str(tmp_path / "cli.db"), "--project", "p"]
    command += ["--engine", "vllm", "--url", vllm_server.url, "--model", SERVED_NAME]
    command += ["--tokenizer", str(tiny_model_folder), "--workers", "2", "--reads-per-request", "4"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "completed: 10 read, 0 failed" in done.stdout
    refused = subprocess.run([*command[:-1], "0"], capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "--reads-per-request must be 1" in refused.stderr
    # more than one request carries is said, where it was cut silently
    cut = subprocess.run([*command[:-1], "5000"], capture_output=True, text=True, timeout=300)
    assert cut.returncode == 0 and "completed: 10 read, 0 failed" in cut.stdout, cut.stderr[-2000:]
    assert "--reads-per-request 5000 is more than one request carries: 32, the most reads in flight (32;" in cut.stderr
    assert "Traceback" not in refused.stderr
    # another engine reads one item a request: the flag is refused, not ignored
    jev = [*command[: command.index("--tokenizer")], "--reads-per-request", "4"]
    jev[jev.index("vllm")] = "jev"
    other = subprocess.run(jev, capture_output=True, text=True, timeout=300)
    assert other.returncode == 2 and "--reads-per-request is for the vllm engine" in other.stderr, other.stderr
    assert "Traceback" not in other.stderr


def test_choices_must_answer_each_prompt_once_by_its_index(tokenizer, schema):
    # two choices for two prompts, both index 0: the second read would go to the wrong canvas
    with CannedFault(200, b'{"choices": [{"index": 0, "logprobs": null}, {"index": 0, "logprobs": null}]}') as server:
        batched = engine(server.url, tokenizer, max_in_flight=2, reads_per_request=2, timeout=5)
        try:
            canvases = [batched.builder.build(schema, state, 42) for state in STATES[:2]]
            with pytest.raises(EngineError, match="indexes 0 to 1"):
                batched.read(canvases)
        finally:
            batched.close()


def test_reads_with_images_count_against_the_same_reads_in_flight(tokenizer, schema):
    import dataclasses
    import threading
    import time

    batched = engine("http://127.0.0.1:9", tokenizer, max_in_flight=4, reads_per_request=4)
    text = [batched.builder.build(schema, f"text item {i}", 7) for i in range(8)]
    pictured = [dataclasses.replace(c, images=("an image",)) for c in text]
    lock, out = threading.Lock(), {"now": 0, "most": 0}

    def post(path, body):  # the server, counting the reads it holds at once
        reads = len(body["prompt"]) if path == "/v1/completions" else 1
        with lock:
            out["now"] += reads
            out["most"] = max(out["most"], out["now"])
        time.sleep(0.3)
        with lock:
            out["now"] -= reads
        raise EngineError("no server")

    batched._post = post
    batched.request_body = lambda c: {"max_tokens": 1, "logprob_token_ids": [], "vllm_xargs": {}}
    try:
        with pytest.raises(EngineError):
            batched.read(text + pictured)
        time.sleep(1.5)  # the rest of the reads, still going out after the first failure
    finally:
        batched.close()
    assert out["most"] == 4


def test_a_prompt_past_the_context_is_named_by_its_place(vllm_server):
    limit = 8192  # serve-model's --max-model-len (the tiny model's own is 131,072)
    answer = completion(vllm_server, prompt=[[2] * 10, [2] * limit])
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "prompt"
    assert "prompt 1 has at least" in answer.json()["error"]["message"]


def test_ray_runs_refuse_reads_per_request_for_another_engine(tmp_path, tiny_model_folder):
    import subprocess
    import sys

    from test_runs import project_db

    project_db(tmp_path / "ray.db", 2)
    command = [sys.executable, "-m", "diffjev.cli", "prelabel", "--db", str(tmp_path / "ray.db"), "--project", "p"]
    command += ["--engine", "transformers", "--model", str(tiny_model_folder), "--reads-per-request", "4", "--ray"]
    refused = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "--reads-per-request is for the vllm engine" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_a_batch_whose_caller_hung_up_stops_reading(vllm_server, dgemma_engine, monkeypatch):
    """vLLM aborts a request whose client disconnects; this server read every prompt of it to the end first,
    holding the model lock for the requests still waiting (4 long prompts took 28 s)."""
    import time

    forwards = []
    forward = dgemma_engine.denoised_logprobs

    def slow_forward(*args):  # a slow server's read: time for the caller to give up between prompts
        forwards.append(time.monotonic())
        time.sleep(0.3)
        return forward(*args)

    monkeypatch.setattr(dgemma_engine, "denoised_logprobs", slow_forward)
    body = completion_body(prompt=[[2, 106, 1645, 108]] * 12)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{vllm_server.url}/v1/completions", json=body, timeout=0.5)
    while not forwards or time.monotonic() - forwards[-1] < 1.5:  # until no read has begun for 1.5 s
        time.sleep(0.1)
    assert len(forwards) <= 3  # of the 12: the caller hung up during the second
    monkeypatch.undo()
    assert completion(vllm_server).status_code == 200  # and the server reads on
