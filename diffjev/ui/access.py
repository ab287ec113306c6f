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
import time
from base64 import b64decode
from pathlib import Path
from typing import Any, Callable

import gradio as gr
from starlette.requests import HTTPConnection
from starlette.responses import HTMLResponse, JSONResponse

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


def hub_sign_in_configured() -> bool:
    """A Space with `hf_oauth: true` in its front matter sets OAUTH_CLIENT_ID: visitors sign in with Hugging Face."""
    return bool(os.environ.get("OAUTH_CLIENT_ID"))


def hub_session_secret() -> str:
    """The key Gradio's OAuth signs its session cookie with (gradio.oauth.attach_oauth)."""
    from gradio import oauth

    return hashlib.sha256(((oauth.OAUTH_CLIENT_SECRET or "") + "-v4").encode()).hexdigest()


def signed_in_hub_user(connection: HTTPConnection) -> str | None:
    """The Hugging Face username of a signed-in visitor, read from Gradio's signed session cookie; None
    when there is no valid one. Read-only: Gradio's own session middleware writes the cookie."""
    from itsdangerous import BadSignature, TimestampSigner

    cookie = connection.cookies.get("session")
    if not cookie:
        return None
    try:
        data = TimestampSigner(hub_session_secret()).unsign(cookie.encode(), max_age=SESSION_MAX_AGE)
        session = json.loads(b64decode(data))
    except (BadSignature, ValueError):
        return None
    info = session.get("oauth_info") if isinstance(session, dict) else None
    if not isinstance(info, dict) or (info.get("expires_at") or float("inf")) < time.time():
        return None  # never signed in, or the sign-in expired (as Gradio's own OAuth profile treats it)
    user = (info.get("userinfo") or {}).get("preferred_username")
    return user if isinstance(user, str) and user else None


# The gate ---------------------------------------------------------------------------------------------------


class AccessGate:
    """ASGI middleware: every request of a signed-in user is checked against the project's members.

    `password_user` resolves a password login (Gradio's session token); with `hub_sign_in`, visitors must
    be signed in with Hugging Face on every route but the sign-in's own."""

    def __init__(
        self,
        app: Any,
        *,
        may_use: Callable[[str, str | None], bool],
        password_user: Callable[[HTTPConnection], str | None] | None = None,
        hub_sign_in: bool = False,
    ):
        self.app, self.may_use = app, may_use
        self.password_user, self.hub_sign_in = password_user, hub_sign_in

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        connection = HTTPConnection(scope)
        path = scope.get("path", "")
        user = None
        if self.hub_sign_in:
            user = signed_in_hub_user(connection)
            if user is None and path not in SIGN_IN_ROUTES:
                await self._refuse(scope, receive, send, 401, sign_in_page(), "sign in with Hugging Face first")
                return
        elif self.password_user is not None:
            user = self.password_user(connection)
        open_to_all = path == "/logout" or path.startswith(ASSET_PREFIXES)  # anyone may sign out
        project = connection.query_params.get("project") or None
        if user is not None and not open_to_all and not self.may_use(user, project):
            log.warning("refused %s %s: %r may not open project %r", scope.get("method", "WS"), path, user, project)
            # The same words whether the project exists or not: nothing is learnt of others' projects.
            detail = (
                f"no project named {project!r} that {user} can open"
                if project
                else f"{user} is not a member of any project"
            )
            await self._refuse(scope, receive, send, 403, not_a_member_page(user, project), detail)
            return
        await self.app(scope, receive, send)

    @staticmethod
    async def _refuse(scope: dict, receive: Any, send: Any, status: int, page: str, detail: str) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        wants_page = scope.get("method") == "GET" and scope.get("path") in ("/", "")
        # "error" is what Gradio's page shows of a refused event; "detail" what FastAPI's clients read
        body = {"detail": detail, "error": detail, "visible": True, "title": "Not allowed"}
        response = HTMLResponse(page, status) if wants_page else JSONResponse(body, status)
        await response(scope, receive, send)


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
