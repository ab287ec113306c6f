"""`python app.py` as a newcomer runs it: where it listens (GRADIO_SERVER_PORT, then PORT, then 7860; localhost,
or every address on a Space), a taken or a bad port said in one line at once, the URL printed once it
serves, `--help` listing every setting, and the fallback notice in one readable line."""

import html
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from sqlalchemy import func, select

from conftest import free_port
from storage.db import Database
from storage.models import Suggestion

ROOT = Path(__file__).parent.parent
SETTING_NAME = re.compile(r"DIFFJEV_[A-Z_]*[A-Z]")


def studio_env(tmp_path, **settings) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DIFFJEV_DB": str(tmp_path / "studio.db"), "HF_HUB_OFFLINE": "1"}
    for name in ("GRADIO_SERVER_PORT", "PORT", "GRADIO_SERVER_NAME", "SPACE_ID", "DIFFJEV_USERS", "OAUTH_CLIENT_ID"):
        env.pop(name, None)
    return {**env, **settings}


def run_app(tmp_path, *args, timeout=60, **settings) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "app.py"), *args],
        cwd=tmp_path,
        env=studio_env(tmp_path, **settings),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def db_count(db: Database, table) -> int:
    with db.read() as session:
        return session.scalar(select(func.count()).select_from(table))


def settings_in_source() -> set[str]:
    files = [ROOT / "app.py", *(ROOT / "diffjev").rglob("*.py"), *(ROOT / "storage").rglob("*.py")]
    return {name for path in files for name in SETTING_NAME.findall(path.read_text(encoding="utf-8"))}


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_every_setting_with_its_default_and_loads_nothing(tmp_path, flag):
    started = time.monotonic()
    done = run_app(tmp_path, flag)
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 20  # no Gradio, no model: a second on an idle machine
    names = settings_in_source() | {"GRADIO_SERVER_PORT", "PORT", "GRADIO_SERVER_NAME", "GRADIO_TEMP_DIR", "SPACE_ID"}
    assert len(names) > 15
    lines = done.stdout.splitlines()
    for name in sorted(names):
        line = next((line for line in lines if line.split()[:1] == [name]), None)
        assert line is not None, f"{name} is read by the studio but not listed by --help"
        assert "(default: " in line, line
    assert not list(tmp_path.iterdir())  # no database, nothing written


@pytest.mark.parametrize(
    "settings, named",
    [
        ({"GRADIO_SERVER_PORT": "abc"}, "GRADIO_SERVER_PORT='abc'"),
        ({"GRADIO_SERVER_PORT": "70000", "PORT": "7861"}, "GRADIO_SERVER_PORT='70000'"),
        ({"PORT": "0"}, "PORT='0'"),
        # str.isdigit() is true for these, int() refuses or reads them: a port is ASCII digits only
        ({"GRADIO_SERVER_PORT": "\u00b2"}, "GRADIO_SERVER_PORT='\u00b2'"),
        ({"PORT": "\uff17\uff18\uff17\uff11"}, "PORT='\uff17\uff18\uff17\uff11'"),
    ],
)
def test_a_bad_port_is_one_line_naming_the_setting(tmp_path, settings, named):
    done = run_app(tmp_path, **settings)
    assert done.returncode != 0
    said = done.stderr.strip()
    assert said.count("\n") == 0 and named in said and "1 to 65535" in said, said
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("setting", ["GRADIO_SERVER_PORT", "PORT"])
def test_a_taken_port_is_said_at_once_and_the_process_ends(tmp_path, setting):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        started = time.monotonic()
        done = run_app(tmp_path, timeout=30, **{setting: str(port)})
        seconds = time.monotonic() - started
    assert done.returncode != 0
    said = done.stderr.strip()
    assert said.count("\n") == 0 and f"port {port} is taken" in said and f"set {setting} to a free port" in said
    assert seconds < 10, f"took {seconds:.1f} s: the port must be checked before anything slow"
    assert not (tmp_path / "studio.db").exists()  # refused before anything was created


def test_it_serves_on_gradio_server_port_before_port_and_prints_the_url(tmp_path, tiny_model_folder):
    port, other = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "app.py")],
        cwd=tmp_path,
        env=studio_env(tmp_path, GRADIO_SERVER_PORT=str(port), PORT=str(other), DIFFJEV_MODEL=str(tiny_model_folder)),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        said = []
        deadline = time.monotonic() + 180
        while not any(line.startswith("Running on") for line in said):
            line = proc.stdout.readline()
            assert line or proc.poll() is None, "".join(said)[-2000:]
            said.append(line)
            assert time.monotonic() < deadline, "".join(said)[-2000:]
        assert said[-1].strip() == f"Running on http://127.0.0.1:{port}"
        assert httpx.get(f"http://127.0.0.1:{port}/", timeout=30).status_code == 200
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://127.0.0.1:{other}/", timeout=5)
        # a first start: the demo is pre-labeled once the model is ready, suggestions stored as they come
        db = Database(str(tmp_path / "studio.db"))
        while not db_count(db, Suggestion):
            assert proc.poll() is None and time.monotonic() < deadline, "no demo suggestion came"
            time.sleep(1)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # the model libraries' own warnings (transformers' FutureWarning at every read) stay out of the log
    logged = "".join(said) + proc.stdout.read()
    open("/tmp/logged.txt", "w").write(logged)
    assert "Warning" not in logged, logged[-2000:]


def test_the_host_is_localhost_else_every_address_on_a_space():
    from diffjev.settings import listen_host, listen_port

    assert listen_host({}) == "127.0.0.1"
    assert listen_host({"SPACE_ID": "team/studio"}) == "0.0.0.0"
    assert listen_host({"SPACE_ID": "team/studio", "GRADIO_SERVER_NAME": "::1"}) == "::1"
    assert listen_port({}) == (7860, "GRADIO_SERVER_PORT")
    assert listen_port({"PORT": "8080"}) == (8080, "PORT")
    assert listen_port({"PORT": "8080", "GRADIO_SERVER_PORT": "7000"}) == (7000, "GRADIO_SERVER_PORT")


def test_on_a_space_with_no_login_it_refuses_every_address(tmp_path):
    done = run_app(tmp_path, timeout=120, SPACE_ID="team/studio", GRADIO_SERVER_PORT=str(free_port()))
    assert done.returncode != 0 and "refusing to listen on 0.0.0.0 with no login" in done.stderr, done.stderr


def test_the_fallback_notice_is_one_readable_line_without_the_network_error(tmp_path, monkeypatch, caplog):
    """The issue's newcomer: no diffusion model downloaded, no Hub; the offline Gemma reads instead (the real
    one: this is the test that loads it), and the header says so in words, the network error in the log."""
    from diffjev.engines.auto import EngineChoice, choose_engine
    from diffjev.ui.context import Studio
    from diffjev.ui.studio import header_text
    from studio_fixtures import studio_db

    nowhere = f"http://127.0.0.1:{free_port()}"  # nothing listens: the Hub probe fails at once
    monkeypatch.setenv("HF_ENDPOINT", nowhere)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("DIFFJEV_MODEL", "no-such-org/no-such-diffusion-model")
    monkeypatch.delenv("DIFFJEV_VLLM_URL", raising=False)
    with caplog.at_level("WARNING", logger="diffjev"):
        chosen = choose_engine(EngineChoice())
    try:
        notice = chosen.description
        assert chosen.fallback and "\n" not in notice
        assert f"offline autoregressive model {chosen.engine.model_name}" in notice
        assert (
            "diffusion model no-such-org/no-such-diffusion-model is not downloaded and the Hub cannot be reached"
            in (notice)
        )
        assert "DIFFJEV_VLLM_URL and DIFFJEV_VLLM_MODEL" in notice and "DIFFJEV_MODEL to" in notice
        for raw in ("127.0.0.1", "unreachable", "Errno", "Connect", "connection", "Traceback"):
            assert raw not in notice, raw
        assert nowhere in caplog.text  # the detail is kept, in the log
        studio = Studio(studio_db(tmp_path / "f.db", ["charged twice"]), chosen, "tickets")
        header = html.unescape(header_text(studio, "tickets").split("\n", 1)[1])  # as the page shows it
        assert "\n" not in header and header.startswith("⚠️ **Pre-labels from:** FALLBACK: the offline")
    finally:
        chosen.engine.close()


@pytest.mark.parametrize("asked, shown", [("", False), ("1", True)])
def test_library_warnings_stay_out_of_the_log_unless_asked_for(tmp_path, asked, shown):
    script = (
        "import warnings\n"
        "from diffjev.settings import quiet_libraries\n"
        "quiet_libraries()\n"
        "warnings.warn_explicit('cache is renamed', FutureWarning, 'capture.py', 1, module='transformers.utils.x')\n"
        "warnings.warn_explicit('a library notice', UserWarning, 'gguf_reader.py', 2, module='gguf.gguf_reader')\n"
        "warnings.warn_explicit('our own', UserWarning, 'read.py', 3, module='diffjev.read')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=studio_env(tmp_path, DIFFJEV_LIBRARY_WARNINGS=asked),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert ("cache is renamed" in done.stderr) is shown and ("a library notice" in done.stderr) is shown
    assert "our own" in done.stderr  # the studio's own warnings are never hidden
