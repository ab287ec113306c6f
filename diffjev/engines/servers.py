"""Several model servers behind one engine.

Each read goes to the healthy server with the fewest reads in flight, so a slow or busy server gets less
of the work without any setting. A server that cannot be reached, times out or answers 5xx is taken out
for a backoff (1 s, doubling up to 30 s, reset by its next good answer) and the read is tried at once on
another server, so a server dying mid-run loses no read: the item's read simply completes elsewhere, and
the run stores it once, as it stores every read. A read that every server failed raises the last error,
and the run's own retries and failure records take over, as with one server.

A 4xx is the request's fault, not the server's: it is raised at once, never retried elsewhere.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence, TypeVar

from diffjev.engines.base import EngineError, server_url, shown_url

T = TypeVar("T")

BACKOFF_START_S = 1.0
BACKOFF_MAX_S = 30.0


def server_urls(spec: str | Sequence[str]) -> list[str]:
    """The servers a `--url` names: one URL, several separated by commas, a list, or a file of them (one
    per line, `#` comments). Each is checked as a base URL (EngineError names the bad one); a space stays
    in its URL, which refuses it, rather than splitting one mistyped URL into two servers."""
    parts: list[str] = []
    for piece in [spec] if isinstance(spec, str) else list(spec):
        if not isinstance(piece, str):
            raise EngineError("a server URL must be text, as http://host:port")
        for word in (w.strip() for w in piece.split(",")):
            if not word:
                continue
            path = Path(word.removeprefix("@"))
            if word.startswith("@") or ("://" not in word and path.is_file()):
                parts.extend(_urls_in_file(path))
            else:
                parts.append(word)
    if not parts:
        raise EngineError("the server URL is empty; give it as http://host:port (several: comma-separated)")
    urls = [server_url(p) for p in parts]
    seen = set()
    for url in urls:
        if url in seen:
            raise EngineError(f"the server {shown_url(url)} is named twice; name each server once")
        seen.add(url)
    return urls


def _urls_in_file(path: Path) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EngineError(
            f"the server list {path} cannot be read ({type(exc).__name__}); give one URL a line"
        ) from None
    urls = [line.split("#", 1)[0].strip() for line in text.splitlines()]
    urls = [u for u in urls if u]
    if not urls:
        raise EngineError(f"the server list {path} names no server; give one URL a line")
    return urls


@dataclass
class _Server:
    url: str
    in_flight: int = 0
    down_until: float = 0.0  # monotonic time before which it is not asked, unless no server is up
    backoff_s: float = 0.0
    failures: int = 0
    reads: int = 0


class Servers:
    """The servers of one engine, with their reads in flight and their health."""

    def __init__(self, urls: Sequence[str], clock: Callable[[], float] = time.monotonic):
        self._servers = [_Server(u) for u in urls]
        self._lock = threading.Lock()
        self._clock = clock

    @property
    def urls(self) -> list[str]:
        return [s.url for s in self._servers]

    def call(self, fn: Callable[[str], T], retriable: Callable[[EngineError], bool]) -> T:
        """`fn(url)` on the least busy healthy server; on a failure `retriable` accepts, the server is taken
        out and the next one tried, each server at most once per call."""
        tried: set[int] = set()
        while True:
            index = self._take(tried)
            server = self._servers[index]
            try:
                result = fn(server.url)
            except EngineError as exc:
                failed_here = retriable(exc)
                self._release(index, ok=not failed_here)
                if not failed_here or len(tried) == len(self._servers):
                    raise
                continue
            except BaseException:
                self._release(index, ok=True)
                raise
            self._release(index, ok=True)
            return result

    def _take(self, tried: set[int]) -> int:
        with self._lock:
            now = self._clock()
            left = [i for i in range(len(self._servers)) if i not in tried]
            up = [i for i in left if self._servers[i].down_until <= now]
            # Every untried server is down: ask the one that comes back soonest rather than fail unasked.
            pool = up or [min(left, key=lambda i: self._servers[i].down_until)]
            index = min(pool, key=lambda i: (self._servers[i].in_flight, self._servers[i].reads))
            server = self._servers[index]
            server.in_flight += 1
            server.reads += 1
            tried.add(index)
            return index

    def _release(self, index: int, ok: bool) -> None:
        with self._lock:
            server = self._servers[index]
            server.in_flight -= 1
            if ok:
                server.backoff_s, server.down_until = 0.0, 0.0
                return
            server.failures += 1
            server.backoff_s = min(BACKOFF_MAX_S, server.backoff_s * 2 if server.backoff_s else BACKOFF_START_S)
            server.down_until = self._clock() + server.backoff_s

    def health(self) -> list[dict[str, Any]]:
        """Per server: its URL (no password), reads in flight and sent, failures, whether it is out (for how
        long yet), and its backoff: how long its last failure put it out for (0 once it answers again)."""
        with self._lock:
            now = self._clock()
            return [
                {
                    "url": shown_url(s.url),
                    "in_flight": s.in_flight,
                    "reads": s.reads,
                    "failures": s.failures,
                    "out_for_s": round(max(0.0, s.down_until - now), 3),
                    "backoff_s": s.backoff_s,
                }
                for s in self._servers
            ]
