"""One HTTP POST with the errors an annotator can act on: each names the endpoint and what went wrong."""

from __future__ import annotations

import threading
from http import HTTPStatus
from typing import Any

import httpx
import orjson

from diffjev.engines.base import EngineError, shown_url

JSON = {"Content-Type": "application/json"}


class ServerAnswered(EngineError):
    """The server answered with a status other than 200; `status` lets a caller act on it (a 400 for a
    field the server does not take) without reading the body."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class HTTPClients:
    """An httpx client per reading thread, each holding one keep-alive connection, with a timeout on
    every request and the API key only in the Authorization header (never in a URL, a body or a log).

    One shared client would do, but httpcore's pool scans every connection on each request and
    response: at 32 reads in flight that scan was the largest share of the client's own time per read.
    """

    def __init__(self, timeout: float, connect_timeout: float, api_key: str | None, servers: int = 1):
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._timeout = httpx.Timeout(timeout, connect=connect_timeout)
        # Loading the CA bundle costs milliseconds: once for all the threads' clients, not once each.
        self._ssl = httpx.create_ssl_context()
        self._local = threading.local()
        self._servers = servers
        self._all: list[httpx.Client] = []
        self._lock = threading.Lock()
        self._closed = False

    def get(self) -> httpx.Client:
        client = getattr(self._local, "client", None)
        if client is None:
            client = httpx.Client(
                headers=self._headers,
                timeout=self._timeout,
                verify=self._ssl,
                # one keep-alive connection per server: a thread has one read in flight at a time
                limits=httpx.Limits(max_connections=self._servers, max_keepalive_connections=self._servers),
            )
            with self._lock:
                if self._closed:
                    client.close()
                    raise EngineError("the engine was closed")
                self._all.append(client)
            self._local.client = client
        return client

    def close(self) -> None:
        with self._lock:
            self._closed = True
            clients, self._all = self._all, []
        for client in clients:
            client.close()


def post_json(client: httpx.Client, where: str, body: dict[str, Any], server: str) -> Any:
    """POST `body` to `where` and return the decoded JSON answer; `server` names the kind of server."""
    shown = shown_url(where)
    response = _post(client, where, body, shown, server)
    try:
        return orjson.loads(response.content)
    except ValueError:
        raise EngineError(f"the {server} at {shown} answered with malformed JSON") from None


def _post(client: httpx.Client, where: str, body: dict[str, Any], shown: str, server: str) -> httpx.Response:
    try:
        response = client.post(where, content=orjson.dumps(body), headers=JSON)
    except httpx.ConnectError as exc:
        raise EngineError(
            f"cannot reach the {server} at {shown} ({str(exc).replace(where, shown)}); is it running?"
        ) from None
    except httpx.TimeoutException:
        raise EngineError(
            f"the {server} at {shown} did not answer within the timeout ({client.timeout.read} s)"
        ) from None
    except httpx.HTTPError as exc:
        detail = str(exc).replace(where, shown) or type(exc).__name__  # never the password in a URL
        raise EngineError(f"request to the {server} at {shown} failed: {detail}") from None
    if response.status_code != 200:
        raise ServerAnswered(
            f"the {server} at {shown} answered {status_description(response.status_code)}", response.status_code
        )
    return response


def server_failed(error: EngineError) -> bool:
    """Whether a failed request says the server is unwell (unreachable, too slow, 5xx, 429, a broken answer),
    so another server may answer it, rather than that the request itself is wrong (any other 4xx)."""
    status = getattr(error, "status", None)
    return status is None or status >= 500 or status == 429


def status_description(status: int) -> str:
    """The status code and a fixed description of it, never the answer's body nor its reason phrase:
    both are the server's words, and a URL pointed at an internal service would show its secrets."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "an unknown status"
    hint = {
        401: "; check the API key (DIFFJEV_VLLM_API_KEY)",
        403: "; check the API key (DIFFJEV_VLLM_API_KEY)",
        404: "; check the URL and the model name",
    }.get(status, "; the server's own log says why")
    return f"{status} ({phrase}){hint}"
