"""The command line end to end: `diffjev serve-model --tiny` as a real process, `diffjev read` against it."""

import json
import os
import subprocess
import sys
import time

import httpx
import pytest

from diffjev.models import cache_dir
from conftest import TICKETS, free_port


def diffjev(*args, input=None, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "diffjev.cli", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


@pytest.fixture(scope="module")
def served(tokenizer):  # the tokenizer fixture converts and caches the offline Gemma tokenizer first
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "diffjev.cli",
            "serve-model",
            "--tiny",
            "--port",
            str(port),
            "--served-model-name",
            "tiny",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"serve-model did not start: {proc.stdout.read().decode()[-2000:]}")
        time.sleep(0.3)
    yield url
    proc.terminate()
    proc.wait(timeout=20)


def test_read_prints_one_decision_per_state_from_a_served_model(served, tmp_path):
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(TICKETS))
    states = 'Everything is down.\n{"subject": "refund", "body": "charged twice"}\n'
    result = diffjev(
        "read",
        "--schema",
        str(schema),
        "--engine",
        "vllm",
        "--url",
        served,
        "--model",
        "tiny",
        "--tokenizer",
        str(cache_dir() / "gemma3-270m-tokenizer"),
        input=states,
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["state"] for line in lines] == ["Everything is down.", {"subject": "refund", "body": "charged twice"}]
    for line in lines:
        assert set(line["answers"]) == {"urgent", "team", "tone"}
        assert sum(line["answers"]["team"]["probabilities"].values()) == pytest.approx(1.0)
    assert f"vLLM server at {served}" in result.stderr


def test_bad_schema_file_exits_with_the_field_and_no_traceback(tmp_path):
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"questions": [{"id": "q", "type": "choice", "instructions": "?", "options": ["a"]}]}))
    result = diffjev("read", "--schema", str(schema), "x")
    assert result.returncode != 0
    assert "question 'q', field 'options'" in result.stderr and "Traceback" not in result.stderr
    missing = diffjev("read", "--schema", str(tmp_path / "nope.json"), "x")
    assert missing.returncode != 0 and "cannot read the schema file" in missing.stderr


def test_a_dead_server_is_named_without_a_traceback(tmp_path):
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(TICKETS))
    result = diffjev("read", "--schema", str(schema), "--engine", "jev", "--url", "http://127.0.0.1:9", "x")
    assert result.returncode != 0
    assert "cannot reach the Jev API at http://127.0.0.1:9/v1/systemone" in result.stderr
    assert "Traceback" not in result.stderr


def test_init_import_prelabel_stats_export_from_the_command_line(tmp_path, tiny_model_folder):
    db = str(tmp_path / "cli.db")
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({**TICKETS, "samples": 1}))
    items = tmp_path / "items.csv"
    items.write_text("id,body,plan\n1,Site is down,pro\n2,,free\n3,Refund me,team\n")
    assert (
        diffjev("init", "--db", db, "--project", "t", "--schema", str(schema), "--text-field", "body").returncode == 0
    )
    imported = diffjev("import", "--db", db, "--project", "t", str(items), "--id-field", "id")
    assert imported.returncode == 0
    assert "imported 2, duplicates 0, rejected 1" in imported.stdout and "line 3: empty text" in imported.stdout
    run = diffjev(
        "prelabel", "--db", db, "--project", "t", "--engine", "transformers", "--model", str(tiny_model_folder)
    )
    assert run.returncode == 0, run.stderr
    assert "run 1 completed: 2 read, 0 failed" in run.stdout
    stats = diffjev("stats", "--db", db, "--project", "t")
    assert "2 items, schema version 1" in stats.stdout and "run 1: transformers" in stats.stdout
    out = tmp_path / "all.jsonl"
    exported = diffjev("export", "--db", db, "--project", "t", "--format", "jsonl", "--out", str(out), "--all")
    assert exported.returncode == 0 and f"wrote 2 items to {out}" in exported.stdout
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in records] == ["1", "3"] and records[0]["fields"] == {"plan": "pro"}
    assert all(r["team_model"] in ("billing", "technical", "account") for r in records)
    again = diffjev("init", "--db", db, "--project", "t", "--schema", str(schema))
    assert again.returncode == 2 and "already exists" in again.stderr and "Traceback" not in again.stderr


def test_every_command_has_help():
    for command in ("init", "import", "prelabel", "export", "stats", "read", "serve-model"):
        result = diffjev(command, "--help")
        assert result.returncode == 0 and "usage: diffjev" in result.stdout


def test_serve_model_builds_the_vllm_command_and_says_when_vllm_is_missing():
    dry = diffjev("serve-model", "--model", "google/diffusiongemma-26B-A4B-it", "--canvas", "128", "--dry-run")
    assert dry.returncode == 0
    assert dry.stdout.split() == [
        "vllm",
        "serve",
        "google/diffusiongemma-26B-A4B-it",
        "--port",
        "8000",
        "--host",
        "127.0.0.1",
        "--diffusion-config",
        '\'{"canvas_length":',
        "128}'",
        "--max-logprobs",
        "32",
        "--enable-prefix-caching",
        "--async-scheduling",
    ]
    missing = diffjev("serve-model", "--model", "google/diffusiongemma-26B-A4B-it")
    assert missing.returncode == 2 and "vllm is not installed here" in missing.stderr


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--batch", "0"], "argument --batch: '0' is not a whole number of at least 1"),  # it read nothing, "completed"
        (["--canvas", "17"], "argument --canvas: '17' is not a canvas width: a multiple of 16"),  # a traceback
        (["--canvas", "8192"], "it must leave room for the prompt within the 8192 tokens"),  # the state uncut
        (["--seed", str(2**70)], "argument --seed"),  # a database error's traceback
        (["--resume", "abc"], "--resume takes a run's id (a number)"),  # a traceback
        (["--workers", "1000"], "--workers 1000 is more than this machine can use"),  # it started them all
    ],
)
def test_prelabel_flags_out_of_range_are_one_line_each(capsys, tmp_path, flags, says):
    from diffjev.cli import main

    db = str(tmp_path / "flags.db")
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(TICKETS))
    main(["init", "--db", db, "--project", "t", "--schema", str(schema)])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(["prelabel", "--db", db, "--project", "t", "--engine", "vllm", "--url", "http://127.0.0.1:9", *flags])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and says in err and "Traceback" not in err
