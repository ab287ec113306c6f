"""What a studio user can make the server reach: engine URLs only from the operator's allow-list and never
with a query or fragment, models only from the Hub or the models folder, and engine errors that never
echo what a server answered. Through the real studio over HTTP, and the command line as a process."""

import json
import os
import subprocess
import sys

import pytest
from gradio_client import Client

from diffjev.engines.base import EngineError
from diffjev.engines.jev_api import JevAPIEngine
from diffjev.services.engine_access import allowed_model
from faulty_servers import CannedFault
from studio_fixtures import serve_studio, studio_db

SECRET = "SECRET-INTERNAL-TOKEN-42"


def Recorder(status: int = 200, body: bytes = SECRET.encode(), content_type: str = "text/plain") -> CannedFault:  # noqa: N802
    """A local service that records every request it gets: an internal service holding a secret, or a
    misbehaving engine server."""
    return CannedFault(status, body, content_type)


@pytest.fixture(scope="module")
def setup(tmp_path_factory, dgemma_engine, tiny_model_folder):
    folder = tmp_path_factory.mktemp("engine-access")
    db = studio_db(folder / "access.db", ["The site is down", "Refund please"], dgemma_engine)
    with Recorder() as internal, Recorder() as allowed:
        server, studio = serve_studio(
            db, dgemma_engine, engine_urls=(allowed.url + "/",), model_dir=tiny_model_folder.parent
        )
        with server:
            yield Client(server.url, verbose=False), internal, allowed


def prelabel(client, kind, url, model=""):
    return client.predict(kind, url, model, "All items", api_name="/prelabel")


@pytest.mark.parametrize("suffix", ["/secret?x=", "/secret#x", "?x="])
def test_a_url_with_a_query_or_fragment_is_refused_and_never_fetched(setup, suffix):
    client, internal, allowed = setup
    with pytest.raises(Exception, match="query or a fragment"):
        prelabel(client, "jev", allowed.url + suffix)
    assert allowed.requests == []


def test_a_url_off_the_allow_list_is_refused_naming_the_setting_and_never_fetched(setup):
    client, internal, _ = setup
    for kind in ("jev", "vllm"):
        with pytest.raises(Exception, match="DIFFJEV_ENGINE_URLS"):
            prelabel(client, kind, internal.url, "google/some-model")
    assert internal.requests == []


@pytest.mark.parametrize(
    "status, body, says",
    [
        (500, f"<html>{SECRET}</html>".encode(), "answered 500 (Internal Server Error)"),
        (403, json.dumps({"error": {"message": SECRET}}).encode(), "answered 403 (Forbidden)"),
        (200, f"{SECRET} is not JSON".encode(), "answered with malformed JSON"),
        (200, json.dumps({"answers": {"urgent": {"probabilities": {"yes": SECRET}}}}).encode(), "not a structured"),
    ],
)
def test_the_failures_table_never_shows_what_the_server_answered(setup, status, body, says):
    client, _, allowed = setup
    allowed.status, allowed.body = status, body
    summary, failures = prelabel(client, "jev", allowed.url)
    rows = failures["data"]
    assert len(rows) == 2 and all(says in row[2] and allowed.url in row[2] for row in rows), rows
    assert SECRET not in json.dumps(rows) + summary
    assert allowed.requests and all(r.endswith(" /v1/systemone") for r in allowed.requests)


def test_a_model_from_the_studio_is_a_hub_name_or_a_folder_in_the_models_folder(setup, tiny_model_folder):
    client, _, _ = setup
    for outside in (str(tiny_model_folder), f"../{tiny_model_folder.parent.name}/{tiny_model_folder.name}", "/etc"):
        with pytest.raises(Exception, match="DIFFJEV_MODEL_DIR"):
            prelabel(client, "transformers", "", outside)
    summary, failures = prelabel(client, "transformers", "", tiny_model_folder.name)
    assert "completed" in summary and "2 items read, 0 failed" in summary, summary


def test_a_refused_model_never_says_where_the_server_keeps_the_models_folder(setup, tiny_model_folder):
    client, _, _ = setup
    models = tiny_model_folder.parent
    if not (models / "out").is_symlink():
        (models / "out").symlink_to(models.parent)
    for name in ("/etc", "../elsewhere", "out", "not a model!"):
        with pytest.raises(Exception) as refused:
            prelabel(client, "transformers", "", name)
        said = str(refused.value)
        assert "the models folder (DIFFJEV_MODEL_DIR)" in said, said
        assert str(models) not in said and str(models.resolve()) not in said, said


def test_allowed_model_refuses_links_out_and_names_that_are_local_paths(tmp_path, monkeypatch):
    models = tmp_path / "models"
    (models / "mine").mkdir(parents=True)
    (models / "out").symlink_to(tmp_path)
    assert allowed_model("mine", models) == str((models / "mine").resolve())
    assert allowed_model("google/gemma-3-270m", models) == "google/gemma-3-270m"
    monkeypatch.chdir(tmp_path)  # "models/mine" exists here: transformers would load it from disk
    for name in ("out", "models/mine", "..", "a/b/c"):
        with pytest.raises(EngineError, match="DIFFJEV_MODEL_DIR"):
            allowed_model(name, models)


@pytest.mark.parametrize(
    "url, says",
    [
        ("http://127.0.0.1:9/x?y=", "query or a fragment"),
        ("http://127.0.0.1:9#top", "query or a fragment"),
        ("ftp://127.0.0.1:9", "http:// or https://"),
        ("http://a@b@127.0.0.1:9", "names no host"),
        ("http://127.0.0.1:99999", "port"),
        ("http://127.0.0.1:9/a b", "spaces"),
    ],
)
def test_every_caller_refuses_odd_server_urls(url, says, tmp_path):
    with pytest.raises(EngineError, match=says):
        JevAPIEngine(url)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"questions": [{"id": "q", "type": "yes_no", "instructions": "?"}]}))
    done = subprocess.run(
        [sys.executable, "-m", "diffjev.cli", "read", "--schema", str(schema), "--engine", "jev", "--url", url, "x"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DIFFJEV_VLLM_URL": ""},
    )
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, done.stderr
