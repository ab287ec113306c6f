"""One HTTP POST with the errors an annotator can act on: each names the endpoint and what went wrong."""

from __future__ import annotations

from typing import Any

import httpx

from diffjev.engines.base import EngineError


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
