"""One HTTP POST with the errors an annotator can act on: each names the endpoint and what went wrong."""

from __future__ import annotations

from typing import Any

import httpx

from diffjev.engines.base import EngineError


def make_client(max_in_flight: int, timeout: float, connect_timeout: float, api_key: str | None) -> httpx.Client:
    """One client per engine: a connection for every read in flight, a timeout on every request, and the
    API key only in the Authorization header (never in a URL, a body or a log)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.Client(headers=headers, timeout=httpx.Timeout(timeout, connect=connect_timeout),
                        limits=httpx.Limits(max_connections=max_in_flight, max_keepalive_connections=max_in_flight))


def post_json(client: httpx.Client, where: str, body: dict[str, Any], server: str) -> Any:
    """POST `body` to `where` and return the decoded JSON answer; `server` names the kind of server."""
    try:
        response = client.post(where, json=body)
    except httpx.ConnectError as exc:
        raise EngineError(f"cannot reach the {server} at {where} ({exc}); is it running?") from None
    except httpx.TimeoutException:
        raise EngineError(f"the {server} at {where} did not answer within the timeout "
                          f"({client.timeout.read} s)") from None
    except httpx.HTTPError as exc:
        raise EngineError(f"request to the {server} at {where} failed: {exc}") from None
    if response.status_code != 200:
        raise EngineError(f"the {server} at {where} answered {response.status_code}: {_error_message(response)}")
    try:
        return response.json()
    except ValueError:
        raise EngineError(f"the {server} at {where} answered with malformed JSON: {response.text[:200]!r}") from None


def _error_message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:200] or response.reason_phrase
