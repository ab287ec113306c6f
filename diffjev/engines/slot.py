"""The studio's engine, loaded in a background thread: the page serves at once, and whatever needs the
model asks the slot, which answers with the engine, "still loading", or why there is none."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from diffjev.engines.auto import ChosenEngine
from diffjev.engines.base import Engine, EngineError
from diffjev.models import ModelLoadError

log = logging.getLogger("diffjev")
STILL_LOADING = "the model is still loading; try again when the header names it"


class EngineNotReady(EngineError):
    """The model is still loading: nothing is wrong, the request came early."""


class EngineSlot:
    def __init__(self) -> None:
        self._settled = threading.Event()
        self.chosen: ChosenEngine | None = None
        self.error: str | None = None  # why loading failed, in one line for the header
        self._thread: threading.Thread | None = None

    @classmethod
    def holding(cls, chosen: ChosenEngine) -> EngineSlot:
        """A slot with its engine already loaded."""
        slot = cls()
        slot.chosen = chosen
        slot._settled.set()
        return slot

    @classmethod
    def loading(
        cls, load: Callable[[], ChosenEngine], then: Callable[[ChosenEngine], None] | None = None
    ) -> EngineSlot:
        """A slot whose engine `load` makes in a background thread, begun by `start()`; `then` runs in that
        thread once the engine is ready."""
        slot = cls()
        slot._thread = threading.Thread(target=slot._load, args=(load, then), daemon=True, name="engine-load")
        return slot

    def start(self) -> EngineSlot:
        if self._thread is not None and not self._thread.is_alive() and not self.settled:
            self._thread.start()
        return self

    def _load(self, load: Callable[[], ChosenEngine], then: Callable[[ChosenEngine], None] | None) -> None:
        try:
            chosen = load()
        except (EngineError, ModelLoadError) as exc:  # written for people: the header shows its first line
            log.warning("no model to pre-label with: %s", exc)
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self.error = first_line.rstrip(".")  # the page ends the sentence: "….." never shows
        except Exception:  # anything else: the detail goes to the log, never to the page
            log.exception("loading the model failed")
            self.error = "loading the model failed; the studio's log has the detail"
        else:
            self.chosen = chosen
            log.info("pre-labels from %s", chosen.description)
        finally:
            self._settled.set()
        if self.chosen is not None and then is not None:
            then(self.chosen)

    @property
    def ready(self) -> bool:
        return self.chosen is not None

    @property
    def settled(self) -> bool:
        """Loaded, or failed: nothing will change any more."""
        return self._settled.is_set()

    def wait(self, timeout: float | None = None) -> ChosenEngine:
        """The chosen engine, once loaded (waiting up to `timeout` seconds); EngineNotReady while it is still
        loading, EngineError when it could not be loaded."""
        self._settled.wait(timeout)
        if self.chosen is not None:
            return self.chosen
        if self.error is not None:
            raise EngineError(f"no model to read with: {self.error}")
        raise EngineNotReady(STILL_LOADING)

    @property
    def engine(self) -> Engine:
        """The engine now, or EngineNotReady / EngineError."""
        return self.wait(0).engine
