"""Backoff on failed logins, per user and per client address, for the studio's login and the API's Basic
auth alike: after `DIFFJEV_LOGIN_FAILURES` failures in a row (default 5) the user, or the address, is
refused for `DIFFJEV_LOGIN_BACKOFF` seconds (default 1), doubling with each further failure up to 15
minutes. Every failure is logged with the user and the address, never the password.

A user's backoff binds only the addresses that have failed in the last 15 minutes: otherwise anyone could
keep a user locked out by failing as them from address after address. So the user signs in from their own
address while an attacker's are refused; the price is that an attacker with many fresh addresses gets one
guess from each before that address is bound too (its own backoff then applies).

Gradio calls the login check with the user and password only, so a small ASGI middleware keeps each
request's client address in a context variable for it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable

log = logging.getLogger("diffjev")
MAX_DELAY = 15 * 60.0
FORGET_AFTER = 15 * 60.0  # failures this long ago no longer count
# Users and addresses are kept only while their failures count, and at most this many at once (the ones
# failing longest ago go first): every name anyone tries, 60,000 characters each, would otherwise stay.
MAX_KEPT = 10_000
NAME_CHARS = 200  # of a tried name, as key and in the log: no user's name is longer (PERSON_CHARS)
_client_address: ContextVar[str] = ContextVar("client_address", default="unknown")


class Throttled(Exception):
    """A login refused without checking the password, for `seconds` more."""

    def __init__(self, who: str, seconds: float):
        self.seconds = seconds
        super().__init__(f"too many failed logins for {who}; try again in {max(1, round(seconds))} s")


@dataclass
class _Failures:
    count: int = 0
    last: float = 0.0
    locked_until: float = 0.0


class LoginThrottle:
    def __init__(self, allowed: int = 5, base_delay: float = 1.0, clock: Callable[[], float] = time.monotonic):
        self.allowed, self.base_delay, self.clock = allowed, base_delay, clock
        self._failures: dict[str, _Failures] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_env(cls) -> LoginThrottle:
        return cls(_env_number("DIFFJEV_LOGIN_FAILURES", 5, int), _env_number("DIFFJEV_LOGIN_BACKOFF", 1.0, float))

    def check(self, username: str, address: str, password_ok: Callable[[], bool]) -> bool:
        """Whether the login succeeds; Throttled, before the password is looked at, while the user or
        the address is locked out."""
        username = username[:NAME_CHARS]
        keys = {f"user {username!r}": f"user:{username}", f"address {address}": f"address:{address}"}
        now = self.clock()
        with self._lock:
            from_here = self._failures.get(keys[f"address {address}"])
            clean_address = from_here is None or now - from_here.last > FORGET_AFTER
            for who, key in keys.items():
                entry = self._failures.get(key)
                if key.startswith("user:") and clean_address:
                    continue  # other addresses' failures do not lock the user out of this one
                if entry is not None and entry.locked_until > now:
                    raise Throttled(who, entry.locked_until - now)
        if password_ok():
            with self._lock:
                self._failures.pop(keys[f"user {username!r}"], None)
            return True
        with self._lock:
            delays = [self._fail(key, now) for key in keys.values()]
        log.warning(
            "failed login for user %r from %s%s",
            username,
            address,
            f"; refused for {max(delays):g} s" if max(delays) else "",
        )
        return False

    def _fail(self, key: str, now: float) -> float:
        if key not in self._failures and len(self._failures) >= MAX_KEPT:
            self._forget(now)
        entry = self._failures.setdefault(key, _Failures())
        if now - entry.last > FORGET_AFTER:
            entry.count = 0
        entry.count += 1
        entry.last = now
        if entry.count < self.allowed:
            return 0.0
        delay = min(MAX_DELAY, self.base_delay * 2 ** (entry.count - self.allowed))
        entry.locked_until = now + delay
        return delay

    def _forget(self, now: float) -> None:
        """Drop the entries whose failures no longer count and that are not refused; past MAX_KEPT still,
        the ones that failed longest ago."""
        self._failures = {
            key: entry
            for key, entry in self._failures.items()
            if now - entry.last <= FORGET_AFTER or entry.locked_until > now
        }
        if len(self._failures) >= MAX_KEPT:
            newest = sorted(self._failures.items(), key=lambda kv: kv[1].last)[len(self._failures) - MAX_KEPT // 2 :]
            self._failures = dict(newest)


def _env_number(name: str, default, kind):
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = kind(raw)
    except ValueError:
        value = -1
    if value < 0 or (kind is int and value < 1):
        raise ValueError(
            f"{name} must be a positive {'whole number' if kind is int else 'number of seconds'}, not {raw!r}"
        )
    return value


def current_address() -> str:
    """The client address of the request being handled (set by ClientAddress)."""
    return _client_address.get()


class ClientAddress:
    """ASGI middleware: keeps each HTTP request's client address where the login check can read it."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope.get("client"):
            token = _client_address.set(scope["client"][0])
            try:
                return await self.app(scope, receive, send)
            finally:
                _client_address.reset(token)
        return await self.app(scope, receive, send)
