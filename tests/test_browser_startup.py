"""The page at once: it serves while the model is still loading, the header says so, what needs the model
says it is still loading, and the header names the engine once it is ready, without a page reload."""

import threading

import httpx
import pytest

from diffjev.engines.auto import ChosenEngine
from diffjev.engines.base import EngineError
from diffjev.engines.slot import EngineSlot
from diffjev.models import ModelLoadError
from studio_fixtures import serve_studio, studio_db

ENGINE = "transformers, tiny random DiffusionGemma"


def gated_slot(engine, gate: threading.Event) -> EngineSlot:
    """A slot whose model is 'loaded' when the test sets the gate."""

    def load() -> ChosenEngine:
        assert gate.wait(120), "the test never let the model load"
        return ChosenEngine(engine, ENGINE)

    return EngineSlot.loading(load).start()


def test_the_page_serves_while_the_model_loads_and_the_header_follows_it(tmp_path, dgemma_engine, browser):
    gate = threading.Event()
    slot = gated_slot(dgemma_engine, gate)
    server, _ = serve_studio(studio_db(tmp_path / "s.db", ["charged twice"]), slot)
    try:
        with server:
            page = browser.new_page()
            page.goto(server.url)
            banner = page.locator("#engine-banner")
            banner.get_by_text("Loading the model").wait_for(timeout=30_000)
            assert "pre-labels start when it is ready" in banner.inner_text()
            page.get_by_role("tab", name="Try a read").click()
            page.locator("#try-read").click()
            page.locator("#try-status").get_by_text("the model is still loading").wait_for(timeout=30_000)
            gate.set()  # the model is ready: the header names it, with no reload
            banner.get_by_text(f"Pre-labels from: {ENGINE}").wait_for(timeout=30_000)
            assert "Loading the model" not in banner.inner_text()
            page.locator("#try-read").click()
            page.locator("#try-status").get_by_text("draw(s)").wait_for(timeout=60_000)
            page.close()
    finally:
        gate.set()


def test_a_model_that_fails_to_load_is_named_in_one_line_and_the_rest_works(tmp_path, dgemma_engine, browser):
    def load() -> ChosenEngine:
        raise ModelLoadError("cannot load the model 'x/y': [Errno 2] No such file\nTraceback (most recent)", "gone")

    slot = EngineSlot.loading(load).start()
    with pytest.raises(EngineError, match="no model to read with"):
        slot.wait(30)
    server, _ = serve_studio(studio_db(tmp_path / "f.db", ["charged twice"]), slot)
    with server:
        page = browser.new_page()
        page.goto(server.url)
        banner = page.locator("#engine-banner")
        banner.get_by_text("No model for pre-labels").wait_for(timeout=30_000)
        said = banner.inner_text()
        assert "Traceback" not in said and "cannot load the model" in said
        # the Jev API says why, as a service answers while it cannot serve: 503
        answer = httpx.post(
            server.url + "/v1/systemone",
            json={
                "state": "The export is broken.",
                "questions": {"urgent": {"type": "noul", "instructions": "Urgent?"}},
            },
            timeout=30,
        )
        assert answer.status_code == 503 and "no model to read with" in answer.text
        page.close()
