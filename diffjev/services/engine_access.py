"""What a studio user may point the server at when choosing an engine in the Pre-label tab.

The studio's server makes the requests and loads the models, so a URL or a model name typed on the page
is the server reaching out or reading its own disk on a user's behalf. The project has no admin role, so
the operator's settings are the allow-list:

- a server URL must be one of `DIFFJEV_ENGINE_URLS` (comma-separated base URLs) or the studio's own
  `DIFFJEV_VLLM_URL`; the engine then uses the URL as configured (with its credentials, if any);
- a model is a Hugging Face Hub name, or a folder inside `DIFFJEV_MODEL_DIR` (default `./models`), never
  a path elsewhere on the server: loading a checkpoint can run code.

The command line is run by the operator and keeps accepting any URL and any path.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Sequence
from urllib.parse import urlsplit

from diffjev.engines.auto import EngineChoice
from diffjev.engines.base import EngineError, server_url, shown_url

ENGINE_URLS_SETTING = "DIFFJEV_ENGINE_URLS"
MODEL_DIR_SETTING = "DIFFJEV_MODEL_DIR"
# owner/name as the Hub spells repositories; no '..', no leading dot, no absolute path.
HUB_MODEL = re.compile(r"[A-Za-z0-9][\w-]*(\.[\w-]+)*(/[A-Za-z0-9][\w-]*(\.[\w-]+)*)?")
# Kinds that load the named model (or its tokenizer) on the studio's server; the Jev API only sends it.
LOADS_MODEL = ("vllm", "transformers", "autoregressive", "autoregressive-sequential")


def configured_engine_urls() -> tuple[str, ...]:
    """The operator's allow-list from `DIFFJEV_ENGINE_URLS`."""
    return tuple(u.strip() for u in os.environ.get(ENGINE_URLS_SETTING, "").split(",") if u.strip())


def default_model_dir() -> Path:
    return Path(os.environ.get(MODEL_DIR_SETTING, "models"))


def _key(url: str) -> tuple[str, str, int | None, str]:
    """What makes two base URLs the same server: scheme, host, port and path, not the credentials."""
    parts = urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default, parts.path.rstrip("/")


def allowed_server_url(typed: str, allowed: Sequence[str]) -> str:
    """The allow-listed URL that `typed` names, or EngineError naming the setting to change."""
    wanted = _key(server_url(typed))  # a query, a fragment or an odd URL is refused before any comparison
    for entry in [*allowed, os.environ.get("DIFFJEV_VLLM_URL") or ""]:
        try:
            if entry and _key(server_url(entry)) == wanted:
                return entry
        except EngineError:  # a malformed entry in the settings matches nothing
            continue
    raise EngineError(
        f"the server URL {shown_url(typed)} is not one the studio may use; the operator can add it "
        f"to {ENGINE_URLS_SETTING} (comma-separated base URLs) and restart the studio"
    )


def allowed_model(name: str, model_dir: Path) -> str:
    """A folder inside `model_dir` (as its resolved path) or a Hub name; anything else is EngineError, which
    names the folder by its setting, never by where the server keeps it."""
    where = Path(name)
    if not where.is_absolute() and ".." not in where.parts and "\x00" not in name:
        root = model_dir.resolve()
        local = (root / where).resolve()  # a link out of the folder resolves outside it
        inside = local.is_relative_to(root) and local != root
        if inside and local.is_dir():
            return str(local)
        if not inside and (root / where).exists():
            raise EngineError(
                f"model {name!r} leads outside the models folder ({MODEL_DIR_SETTING}); move the model into it"
            )
    # transformers loads a name that exists as a relative folder from that folder, not from the Hub.
    if HUB_MODEL.fullmatch(name) and len(name) <= 96 and not where.exists():
        return name
    raise EngineError(
        f"model {name!r}: from the studio a model is a Hugging Face Hub name (owner/name) or a folder "
        f"inside the models folder ({MODEL_DIR_SETTING}); move the model there, or "
        f"run it from the command line"
    )


def studio_engine_choice(
    kind: str, url: str | None, model: str | None, *, allowed_urls: Sequence[str], model_dir: Path
) -> EngineChoice:
    """The EngineChoice for what a studio user typed, after the checks above."""
    if url:
        url = allowed_server_url(url, allowed_urls)
    if model and kind in LOADS_MODEL:
        model = allowed_model(model, model_dir)
    return EngineChoice(kind=kind, url=url or None, model=model or None)
