"""Who may reach the studio, checked on every request: the signed-in user (a password login or a Hugging
Face sign-in) must be able to open the project the request names, and files from the outside are only
uploads.

Gradio checks a login when a page or an event starts; it does not know about projects or members, and a
removed member's login would keep working until the server restarts. So one ASGI gate sits in front of
every route (the page, Gradio's API and file routes, the Jev API): it resolves the user from the request
and asks the database, each time, whether that user may open the project named by the request's
`?project=` (the page's address, which Gradio's page sends with every event), or any project where it names
none. Each handler then resolves its own scope (ui.context.Studio.scope), so a request that slips past the
gate's reading of the address still acts only where its user may.
"""

from __future__ import annotations

import hashlib
import html
import json
import logging
import os
import re
import threading
import time
from base64 import b64decode
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

import gradio as gr
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import HTTPConnection
from starlette.responses import HTMLResponse, JSONResponse

from diffjev.api import error_response
from storage import signouts
from storage.db import Database

log = logging.getLogger("diffjev")

# Routes a visitor needs before signing in with Hugging Face: the sign-in itself and its callback.
SIGN_IN_ROUTES = ("/login/huggingface", "/login/callback", "/logout", "/favicon.ico")
# Gradio's own scripts, styles and icons: the same for everyone, no project's data. A page load fetches
# dozens of them, so a signed-in user's membership is not read from the database for each one.
ASSET_PREFIXES = ("/assets/", "/static/", "/svelte/", "/favicon.ico", "/theme.css", "/gradio_api/theme.css")
SESSION_MAX_AGE = 14 * 24 * 60 * 60  # Starlette's SessionMiddleware default, which Gradio's OAuth uses


# Uploads --------------------------------------------------------------------------------------------------


class NotAnUpload(ValueError):
    """A file value that is not a file the user uploaded through Gradio."""


def uploaded_file(value: Any) -> str:
    """The server path of a file the user uploaded, or NotAnUpload.

    A Gradio file value is a path the client sends back, and a client can send any path. Gradio refuses one
    outside its upload folder before a handler runs (create_app turns that check on for the mounted app);
    this is the handler's own check, with every link resolved, so no other caller can pass a path either."""
    path = value if isinstance(value, str) else getattr(value, "path", None) or getattr(value, "name", None)
    if not isinstance(path, str) or not path or "\x00" in path:
        raise NotAnUpload("the file was not uploaded: choose it again with the upload button")
    folder = Path(gr.utils.get_upload_folder()).resolve()
    resolved = Path(path).resolve()
    if not resolved.is_relative_to(folder) or not resolved.is_file():
        raise NotAnUpload("the file was not uploaded through this page: choose it again with the upload button")
    return str(resolved)


# Hugging Face sign-in -------------------------------------------------------------------------------------


def on_a_space(env: Mapping[str, str] | None = None) -> bool:
    """Where Gradio does real OAuth with the Hub: on a Space (SYSTEM=spaces and SPACE_ID, as
    gradio.utils.get_space reads them). Anywhere else Gradio mocks the sign-in routes, and its callback signs
    anyone in as the server's own Hub user."""
    env = os.environ if env is None else env
    return env.get("SYSTEM") == "spaces" and bool(env.get("SPACE_ID"))


def hub_sign_in_configured(env: Mapping[str, str] | None = None) -> bool:
    """A Space with `hf_oauth: true` in its front matter sets OAUTH_CLIENT_ID and OAUTH_CLIENT_SECRET:
    visitors sign in with Hugging Face. Only there: without the secret Gradio signs its session cookie
    with a key anyone can compute, and off a Space its sign-in is a mock."""
    env = os.environ if env is None else env
    return bool(env.get("OAUTH_CLIENT_ID")) and bool(env.get("OAUTH_CLIENT_SECRET")) and on_a_space(env)


def hub_sign_in_refusal(env: Mapping[str, str] | None = None) -> str | None:
    """Why OAUTH_CLIENT_ID cannot turn Hub sign-in on here, or None where it is unset or can."""
    env = os.environ if env is None else env
    if not env.get("OAUTH_CLIENT_ID") or hub_sign_in_configured(env):
        return None
    if not on_a_space(env):
        why = "Hugging Face sign-in works only on a Space (SYSTEM=spaces and SPACE_ID set by Spaces)"
    else:
        why = "OAUTH_CLIENT_SECRET is not set, so the sign-in cookie would be signed with a key anyone knows"
    return (
        f"OAUTH_CLIENT_ID is set, but {why}; here anyone could sign in as anyone. Unset OAUTH_CLIENT_ID and "
        "give logins with DIFFJEV_USERS=user:password,..."
    )


def hub_session_secret() -> str:
    """The key Gradio's OAuth signs its session cookie with (gradio.oauth.attach_oauth)."""
    from gradio import oauth

    return hashlib.sha256(((oauth.OAUTH_CLIENT_SECRET or "") + "-v4").encode()).hexdigest()


class SignedOutSessions:
    """Hub session cookies whose user signed out: refused until they would have expired anyway.

    Gradio's sign-out only empties the cookie in the browser that asked, so a copy of it would go on
    working until its sign-in expires. Kept in the database (storage.signouts), so a restart or another
    studio process on it refuses them too; without one (a test's gate), in memory only."""

    RECHECK_S = 5.0  # a cookie the database holds no sign-out for is asked again after this long
    MAX_CHECKED = 10_000

    def __init__(self, db: Database | None = None) -> None:
        self._until: dict[str, float] = {}
        # cookie key -> when the database last held no sign-out for it: a page load sends dozens of requests,
        # which read the database once, and a sign-out in another studio process counts within RECHECK_S
        self._checked: dict[str, float] = {}
        self._lock = threading.Lock()
        self._db = db

    @staticmethod
    def _key(cookie: str) -> str:
        return hashlib.sha256(cookie.encode()).hexdigest()

    def revoke(self, cookie: str, until: float) -> None:
        now, key = time.time(), self._key(cookie)
        with self._lock:
            self._until = {k: end for k, end in self._until.items() if end > now}
            self._until[key] = until
        if self._db is not None:
            self._db.write(lambda session: signouts.sign_out(session, key, until, now))

    def revoked(self, cookie: str) -> bool:
        key, now = self._key(cookie), time.monotonic()
        with self._lock:
            until = self._until.get(key)
            fresh = now - self._checked.get(key, -self.RECHECK_S) < self.RECHECK_S
        if until is None and self._db is not None and not fresh:
            with self._db.read() as session:
                until = signouts.signed_out_until(session, key)
            with self._lock:
                if until is not None:
                    self._until[key] = until
                else:
                    if len(self._checked) >= self.MAX_CHECKED:
                        self._checked.clear()
                    self._checked[key] = now
        return (until or 0.0) > time.time()


def hub_session(cookie: str | None, signed_out: SignedOutSessions | None = None) -> tuple[str, float] | None:
    """(Hugging Face username, when the sign-in expires) of a valid session cookie, else None: unsigned,
    too old, signed out, expired, or with no `expires_at` (every session has a lifetime)."""
    from itsdangerous import BadSignature, TimestampSigner

    if not cookie or (signed_out is not None and signed_out.revoked(cookie)):
        return None
    try:
        data = TimestampSigner(hub_session_secret()).unsign(cookie.encode(), max_age=SESSION_MAX_AGE)
        session = json.loads(b64decode(data))
    except (BadSignature, ValueError):
        return None
    info = session.get("oauth_info") if isinstance(session, dict) else None
    if not isinstance(info, dict):
        return None  # never signed in
    expires = info.get("expires_at")
    if isinstance(expires, bool) or not isinstance(expires, (int, float)) or not expires > time.time():
        return None  # no lifetime, not a number, or past it (as Gradio's own OAuth profile treats it)
    userinfo = info.get("userinfo")
    user = userinfo.get("preferred_username") if isinstance(userinfo, dict) else None
    return (user, float(expires)) if isinstance(user, str) and user else None


def signed_in_hub_user(connection: HTTPConnection) -> str | None:
    """The Hugging Face username of a signed-in visitor, read from Gradio's signed session cookie; None
    when there is no valid one (the gate has refused a signed-out one already). Read-only: Gradio's own
    session middleware writes the cookie."""
    found = hub_session(connection.cookies.get("session"))
    return found[0] if found else None


# Requests from other sites ------------------------------------------------------------------------------

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
STATE_CHANGING_GETS = ("/logout",)  # a link or an image on another site must not sign anyone out
LOCAL_HOST_NAMES = ("localhost", "127.0.0.1", "::1")
PLAIN_HOST = re.compile(r"(?P<name>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+)(?::\d{1,5})?")
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def allowed_origins(env: Mapping[str, str] | None = None) -> frozenset[str]:
    """DIFFJEV_ALLOWED_ORIGINS: the other origins (`https://host[:port]`, comma-separated) whose pages may
    call the studio with its users' cookies, besides the studio's own."""
    env = os.environ if env is None else env
    found = set()
    for entry in env.get("DIFFJEV_ALLOWED_ORIGINS", "").split(","):
        entry = entry.strip().rstrip("/")
        if not entry:
            continue
        parts = urlsplit(entry)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query:
            raise ValueError(
                f"DIFFJEV_ALLOWED_ORIGINS: {entry[:200]!r} is not an origin; give scheme and host, such as "
                "https://labels.example.org or http://localhost:3000"
            )
        found.add(normal_origin(entry))
    return frozenset(found)


def normal_origin(origin: str) -> str | None:
    """`scheme://host[:port]`, lower case and without its scheme's default port; None for "null" or junk."""
    try:
        parts = urlsplit(origin.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    shown_port = "" if port in (None, DEFAULT_PORTS[parts.scheme]) else f":{port}"
    return f"{parts.scheme}://{host}{shown_port}"


def same_host(origin: str, host_header: str) -> bool:
    """Whether an origin names the host the request was sent to (its Host header). The scheme is not
    compared: behind a proxy or on a Space, TLS ends before the studio, which sees plain HTTP."""
    origin_parts = urlsplit(origin)
    try:
        host_parts = urlsplit(f"//{host_header.strip()}")
        ports = origin_parts.port or DEFAULT_PORTS[origin_parts.scheme], host_parts.port
    except (ValueError, KeyError):
        return False
    if not host_parts.hostname or origin_parts.hostname != host_parts.hostname.lower():
        return False
    origin_port, host_port = ports
    return host_port == origin_port or (host_port is None and origin_port in (80, 443))


def host_refusal(scope: dict, hosts: frozenset[str] | None) -> str | None:
    """Why a request to a studio with no sign-in is refused when its Host is not one of `hosts`, or None.
    With no sign-in anyone who reaches the studio may do anything; a page on another host name whose DNS
    record is turned to 127.0.0.1 would reach it as its own origin (DNS rebinding). None: any host."""
    if hosts is None:
        return None
    host = Headers(scope=scope).get("host")
    if host is None:
        return None
    plain = PLAIN_HOST.fullmatch(host)  # name[:port] and nothing else: no userinfo, fragment or space
    if plain is not None and plain["name"].lower().strip("[]") in hosts:
        return None
    port = (scope.get("server") or (None, None))[1]
    here = f"http://127.0.0.1:{port}/" if port else "http://127.0.0.1 and the studio's port"
    return (
        f"this studio has no login, so it answers only pages on this machine, not on {shown_name(host, 100)}: open "
        f"it at {here}, or give logins with DIFFJEV_USERS to serve it under a host name"
    )


def cross_site_refusal(scope: dict, allowed: frozenset[str]) -> str | None:
    """Why a request from another site's page is refused, or None: its Origin (on a state-changing request
    without one, its Referer) is neither the studio's own origin nor a listed one. A request naming neither
    is not a browser's cross-site request (browsers send Origin on every cross-site fetch and form post)."""
    headers = Headers(scope=scope)
    origin = headers.get("origin")
    changes_state = scope.get("method", "GET") not in SAFE_METHODS or scope.get("path") in STATE_CHANGING_GETS
    if origin is None and changes_state and headers.get("referer"):
        origin = headers["referer"]
    if origin is None and changes_state and headers.get("sec-fetch-site") in ("cross-site", "same-site"):
        origin = "another site's page"  # what the browser says of a page that sent no Referer
    if origin is None:
        return None
    normal = normal_origin(origin)
    if normal is not None and (normal in allowed or same_host(normal, headers.get("host", ""))):
        return None
    return (
        f"refused a request from another site ({shown_name(origin, 100)}): only this studio's own pages, "
        "and origins listed in DIFFJEV_ALLOWED_ORIGINS, may call it"
    )


# Request bodies ---------------------------------------------------------------------------------------------

UPLOAD_PATHS = ("/gradio_api/upload", "/upload")
# A JSON body becomes Python objects many times its size (16 MB of `{}` held 800 MB in Gradio's queue), so
# the cap is what the largest real event needs: an item text of 100,000 characters, escaped.
DEFAULT_MAX_BODY = "1mb"
LOGIN_PATHS = ("/login", "/login/")
LOGIN_BODY = 64 * 1024  # a user name and a password: a login form needs no more
MULTIPART_SLACK = 1024 * 1024  # an upload's own size limit is Gradio's, per file; this is the whole body's


def max_body(env: Mapping[str, str] | None = None) -> int:
    """DIFFJEV_MAX_BODY in bytes: the largest body any route but uploads reads."""
    env = os.environ if env is None else env
    return byte_size("DIFFJEV_MAX_BODY", env.get("DIFFJEV_MAX_BODY") or DEFAULT_MAX_BODY)


def byte_size(setting: str, raw: str) -> int:
    """A size in Gradio's syntax ("16mb", "500kb", "1gb" or bytes), or ValueError naming the setting."""
    from gradio.utils import _parse_file_size

    try:
        size = _parse_file_size(raw.strip().lower())
    except (ValueError, AttributeError):
        size = None
    if not size or size < 1:
        raise ValueError(f"{setting}={raw[:100]!r} is not a size: give one such as 16mb, 500kb or 1gb")
    return size


class BodyTooLarge(StarletteHTTPException):
    """A body past its route's cap, found while it streams in (no Content-Length, or a false one)."""

    def __init__(self, limit: int):
        super().__init__(413, body_refusal(limit), headers={"Connection": "close"})


def body_refusal(limit: int) -> str:
    return (
        f"the request body is over this route's limit of {limit:,} bytes; send less, or raise "
        "DIFFJEV_MAX_BODY (DIFFJEV_MAX_UPLOAD for uploads)"
    )


def shown_name(name: str, width: int = 80) -> str:
    """A name from a request as logs and messages show it: at most `width` characters, printable."""
    text = name if len(name) <= width else name[:width] + f"… ({len(name):,} characters)"
    return text.encode("unicode_escape").decode("ascii")


# The gate ---------------------------------------------------------------------------------------------------


class AccessGate:
    """ASGI middleware, in front of every route:

    1. a request from another site's page is refused (403), whatever cookie it carries, and so is one to a
       studio with no sign-in addressed to another host name (DNS rebinding);
    2. a request needing a sign-in that has none is refused (401) before its body is read; a body is
       refused (413) past its route's cap, by its Content-Length or while it streams in;
    3. the signed-in user must be able to open the project the request names.

    `password_user` resolves a password login (Gradio's session token); `api_user` checks the Jev API's HTTP
    Basic login (raising the HTTPException to answer with); with `hub_sign_in`, visitors must be signed in
    with Hugging Face on every route but the sign-in's own."""

    def __init__(
        self,
        app: Any,
        *,
        may_use: Callable[[str, str | None], bool],
        password_user: Callable[[HTTPConnection], str | None] | None = None,
        api_user: Callable[[HTTPConnection], str] | None = None,
        hub_sign_in: bool = False,
        signed_out: SignedOutSessions | None = None,
        origins: frozenset[str] = frozenset(),
        hosts: frozenset[str] | None = None,
        max_body: int = 1024 * 1024,
        max_upload: int = 200 * 1024 * 1024,
        download_projects: Callable[[str], frozenset[str]] = lambda name: frozenset(),
    ):
        self.app, self.may_use, self.download_projects = app, may_use, download_projects
        self.password_user, self.api_user, self.hub_sign_in = password_user, api_user, hub_sign_in
        self.signed_out, self.origins, self.hosts = signed_out or SignedOutSessions(), origins, hosts
        self.max_body, self.max_upload = max_body, max_upload

    def body_limit(self, path: str) -> int:
        if path in LOGIN_PATHS:
            return LOGIN_BODY
        if path in UPLOAD_PATHS:
            return self.max_upload + MULTIPART_SLACK
        return self.max_body

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        connection = HTTPConnection(scope)
        path, method = scope.get("path", ""), scope.get("method", "WS")
        refusal = host_refusal(scope, self.hosts) or cross_site_refusal(scope, self.origins)
        if refusal:
            log.warning("%s %s: %s", method, shown_name(path), refusal)
            await self._refuse(scope, receive, send, 403, refusal, refusal_page(refusal))
            return
        if method == "OPTIONS" and "access-control-request-method" in connection.headers:
            await self.app(scope, receive, send)  # a listed origin's preflight: CORS answers it, no cookie sent
            return
        user = None
        if self.hub_sign_in:
            found = hub_session(connection.cookies.get("session"), self.signed_out)
            user = found[0] if found else None
            if user is None and path not in SIGN_IN_ROUTES:
                await self._refuse(scope, receive, send, 401, "sign in with Hugging Face first", sign_in_page())
                return
        elif self.password_user is not None:
            user = self.password_user(connection)
            if user is None and path.startswith("/v1/") and self.api_user is not None:
                try:
                    user = self.api_user(connection)
                except StarletteHTTPException as exc:
                    await self._refuse(scope, receive, send, exc.status_code, str(exc.detail), headers=exc.headers)
                    return
            if user is None and method not in SAFE_METHODS and path not in LOGIN_PATHS:
                await self._refuse(scope, receive, send, 401, "log in first")  # before the body is read
                return
        limit = self.body_limit(path)
        length = connection.headers.get("content-length", "")
        if scope["type"] == "http" and length and (not length.isdigit() or int(length) > limit):
            await self._refuse(scope, receive, send, 413, body_refusal(limit))
            return
        open_to_all = path == "/logout" or path.startswith(ASSET_PREFIXES)  # anyone may sign out
        project = connection.query_params.get("project") or None
        if user is not None and not open_to_all and not self.may_use(user, project):
            log.warning(
                "refused %s %s: %r may not open project %s",
                method,
                shown_name(path),
                user,
                shown_name(repr(project)),
            )
            # The same words whether the project exists or not: nothing is learnt of others' projects.
            shown = shown_name(project) if project else None
            detail = (
                f"no project named {shown!r} that {user} can open"
                if shown
                else f"{user} is not a member of any project"
            )
            await self._refuse(scope, receive, send, 403, detail, not_a_member_page(user, shown))
            return
        if user is not None and "/file=" in path:
            # a download's address names no project: the project it was exported from decides
            foreign = sorted(p for p in self.download_projects(path.rsplit("/", 1)[-1]) if not self.may_use(user, p))
            if foreign:
                log.warning("refused %s %s: %r may not open project %s", method, "a download", user, foreign[0])
                shown = shown_name(foreign[0])
                detail = f"this download is of project {shown!r}, which {user} cannot open"
                await self._refuse(scope, receive, send, 403, detail, not_a_member_page(user, shown))
                return
        if method in SAFE_METHODS and has_body(connection.headers):
            # A GET carries no body, and no route reads one: uvicorn would go on taking in what it drops
            await self._refuse(scope, receive, send, 400, f"a {method} request carries no body; send it without one")
            return
        if self.hub_sign_in and path == "/logout":
            self._sign_out(connection)
        await self.app(scope, capped(receive, limit) if scope["type"] == "http" else receive, send)

    def _sign_out(self, connection: HTTPConnection) -> None:
        cookie = connection.cookies.get("session")
        found = hub_session(cookie, self.signed_out)
        if cookie and found:
            self.signed_out.revoke(cookie, found[1])

    @staticmethod
    async def _refuse(
        scope: dict,
        receive: Any,
        send: Any,
        status: int,
        detail: str,
        page: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        # The body, if any, is never read: the connection closes after the answer, or a client could go on
        # sending an endless one into it (uvicorn reads and drops what a kept-alive connection still sends).
        headers = {**(headers or {}), "Connection": "close"}
        wants_page = page is not None and scope.get("method") == "GET" and scope.get("path") in ("/", "")
        if scope.get("path", "").startswith("/v1/"):  # the Jev API answers as vLLM does, `detail` beside
            response = error_response(detail, status, headers=headers)
        elif wants_page:
            response = HTMLResponse(page, status, headers=headers)
        else:
            # "error" is what Gradio's page shows of a refused event; "detail" what FastAPI's clients read
            body = {"detail": detail, "error": detail, "visible": True, "title": "Not allowed"}
            response = JSONResponse(body, status, headers=headers)
        await response(scope, receive, send)


def has_body(headers: Any) -> bool:
    """Whether a request says it sends a body: a Content-Length past 0, or a Transfer-Encoding."""
    length = headers.get("content-length", "").strip()
    return bool(headers.get("transfer-encoding")) or (bool(length) and length != "0")


def capped(receive: Any, limit: int) -> Any:
    """`receive`, refusing (413, through the app's own exception handling) once the body passes `limit`."""
    seen = 0

    async def receive_capped() -> dict:
        nonlocal seen
        message = await receive()
        if message.get("type") == "http.request":
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge(limit)
        return message

    return receive_capped


# A member removed while their page is open: the gate refuses each of the page's events (403), and Gradio's
# page would show one error per event, every few seconds for every timer. Instead the page loads itself
# again at the first refusal, and the gate's own page says, once, why and where to go (not_a_member_page);
# the timers go with the old page. Only the page's events: a refused login keeps Gradio's own message.
REFUSED_EVENTS_JS = """
<script>
(() => {
  const fetchFirst = window.fetch.bind(window);
  // the gate may refuse an event's stream (queue/data) or the reconnect probe (app_id) before any new event
  const EVENTS = /\\/gradio_api\\/(queue\\/(join|data)|upload|run\\/|call\\/|app_id|heartbeat)/;
  let leaving = false;
  window.fetch = async (...args) => {
    const response = await fetchFirst(...args);
    const target = args[0] instanceof Request ? args[0].url : String(args[0]);
    const url = new URL(target, location.href);
    if (response.status !== 403 || url.origin !== location.origin || !EVENTS.test(url.pathname)) return response;
    if (!leaving) { leaving = true; location.reload(); }
    return new Promise(() => {});  // never settles: no error for this event, the page is going
  };
})();
</script>
"""


def refusal_page(said: str) -> str:
    """The page a browser shows for a refused page load: the reason, in words."""
    return (
        "<!doctype html><title>diffjev</title><main style='font-family:sans-serif;max-width:36em;margin:4em auto'>"
        f"<h1>diffjev</h1><p>{html.escape(said[0].upper() + said[1:])}.</p></main>"
    )


def sign_in_page() -> str:
    return (
        "<!doctype html><title>diffjev</title><main style='font-family:sans-serif;max-width:36em;margin:4em auto'>"
        "<h1>diffjev</h1><p>This studio is for signed-in Hugging Face users.</p>"
        "<p><a href='/login/huggingface'>Sign in with Hugging Face</a></p></main>"
    )


def not_a_member_page(user: str, project: str | None) -> str:
    if project:
        said = f"There is no project named <b>{html.escape(project)}</b> that you can open."
        elsewhere = "<p><a href='/'>Open your projects</a> · <a href='/logout'>Sign out</a></p>"
    else:
        said = "You are not a member of any project."
        elsewhere = "<p>Ask an admin to add you to one.</p><p><a href='/logout'>Sign out</a></p>"
    return (
        "<!doctype html><title>diffjev</title><main style='font-family:sans-serif;max-width:36em;margin:4em auto'>"
        f"<h1>diffjev</h1><p>You are signed in as <b>{html.escape(user)}</b>. {said}</p>{elsewhere}</main>"
    )
