"""The studio's settings: every environment variable it reads, where it listens, and `python app.py --help`.

Light on purpose (no Gradio, no model): `--help`, a bad port and a taken port are answered before anything
slow is imported, so a newcomer hears about them in a second rather than after the studio's start-up."""

from __future__ import annotations

import argparse
import os
import socket
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from diffjev.engines.auto import DEFAULT_DIFFUSION_MODEL

DEFAULT_PORT = 7860
PORT_SETTINGS = ("GRADIO_SERVER_PORT", "PORT")  # the first one set wins
LOCAL_HOST = "127.0.0.1"
SPACE_HOST = "0.0.0.0"  # a Space's proxy reaches the app from outside its container


@dataclass(frozen=True)
class Setting:
    name: str
    default: str
    meaning: str


SETTINGS: tuple[Setting, ...] = (
    Setting("GRADIO_SERVER_PORT", str(DEFAULT_PORT), "the port to listen on"),
    Setting("PORT", str(DEFAULT_PORT), "the port, where GRADIO_SERVER_PORT is not set"),
    Setting("GRADIO_SERVER_NAME", f"{LOCAL_HOST}; {SPACE_HOST} on a Space", "the address to listen on"),
    Setting("SPACE_ID", "unset", "set by Hugging Face Spaces: listen on 0.0.0.0 unless GRADIO_SERVER_NAME says"),
    Setting("OAUTH_CLIENT_ID", "unset", "set on a Space with `hf_oauth: true`: visitors sign in with Hugging Face"),
    Setting("GRADIO_TEMP_DIR", "a private folder per studio", "where the studio keeps uploads and downloads"),
    Setting("DIFFJEV_DB", "/data/diffjev.db where /data is writable, else ./diffjev.db", "database file or URL"),
    Setting(
        "DIFFJEV_PROJECT",
        "the first project; the demo on a first start",
        "the project a page opens when its address names none (?project=NAME names one)",
    ),
    Setting("DIFFJEV_VLLM_URL", "unset", "a vLLM server to pre-label with (with DIFFJEV_VLLM_MODEL)"),
    Setting("DIFFJEV_VLLM_MODEL", "unset", "the model name that vLLM server serves"),
    Setting("DIFFJEV_VLLM_API_KEY", "unset", "the vLLM server's API key (sent in the Authorization header)"),
    Setting(
        "DIFFJEV_MODEL",
        DEFAULT_DIFFUSION_MODEL,
        "a diffusion model read in-process: a folder or a Hub name (else the offline Gemma 3 270M)",
    ),
    Setting("DIFFJEV_TOKENIZER", "the model's own", "a tokenizer folder, where the model's cannot be downloaded here"),
    Setting("DIFFJEV_CACHE", "~/.cache/diffjev", "where the offline model is converted once and kept"),
    Setting("DIFFJEV_USERS", "unset: no login", "user:password (or user:hash) pairs, comma-separated: a login"),
    Setting(
        "DIFFJEV_ADMINS",
        "unset: with no logins the local user; with password logins nobody; on a Space its owner",
        "users (comma-separated) who create, archive and delete projects and run every project",
    ),
    Setting("DIFFJEV_ALLOW_ANONYMOUS", "unset", "1: listen beyond localhost with no login, on purpose"),
    Setting(
        "DIFFJEV_ALLOWED_ORIGINS",
        "unset: the studio's own pages only",
        "other sites (https://host[:port], comma-separated) whose pages may call the studio with its users' cookies",
    ),
    Setting("DIFFJEV_MAX_BODY", "1mb", "the largest request body a route but uploads reads (413 past it)"),
    Setting(
        "DIFFJEV_TRUSTED_PROXIES",
        "unset: none",
        "reverse proxies' addresses (comma-separated, or *) whose X-Forwarded-For names the client",
    ),
    Setting("DIFFJEV_LOGIN_FAILURES", "5", "failed logins in a row before a user or an address must wait"),
    Setting("DIFFJEV_LOGIN_BACKOFF", "1", "seconds of that first wait, doubling with each further failure"),
    Setting("DIFFJEV_IMPORT_DIR", "./imports", "saved datasets a user may import by folder name"),
    Setting("DIFFJEV_MAX_IMAGE", "20mb", "the largest image an import takes (500kb, 1gb or bytes)"),
    Setting("DIFFJEV_MAX_UPLOAD", "200mb", "the largest upload accepted"),
    Setting("DIFFJEV_MAX_ITEM_CHARS", "100000", "the longest item text imported, in characters"),
    Setting("DIFFJEV_ENGINE_URLS", "unset", "more engine servers a user may name in the Pre-label tab"),
    Setting("DIFFJEV_MODEL_DIR", "./models", "model folders a user may name in the Pre-label tab"),
    Setting(
        "DIFFJEV_LS_BACKEND_API_KEY",
        "unset: answers anyone",
        "`diffjev serve-ls-backend`'s key (Label Studio sends it as the basic-auth password)",
    ),
    Setting("DIFFJEV_OVERLAP", "10", "percent of items answered by two annotators"),
    Setting("DIFFJEV_CSV_ESCAPE", "1", "0: write CSV cells verbatim, spreadsheet formulas unescaped"),
    Setting("DIFFJEV_LIBRARY_WARNINGS", "unset", "1: show the model libraries' own warnings in the log"),
    Setting("HF_HUB_OFFLINE", "unset", "1: never ask the Hugging Face Hub for a model"),
    Setting("HF_ENDPOINT", "https://huggingface.co", "the Hub that models are fetched from"),
    Setting("HF_TOKEN", "unset", "a Hub token, for pushing an export to the Hub"),
)


# The libraries whose warnings are theirs to fix, not the user's: transformers alone warns once per read.
LIBRARIES = ("transformers", "torch", "accelerate", "gguf", "datasets", "huggingface_hub", "gradio", "pyarrow")


def quiet_libraries(env: Mapping[str, str] | None = None) -> None:
    """Keeps the model libraries' warnings (deprecations, future changes) out of the log, unless
    DIFFJEV_LIBRARY_WARNINGS=1 asks for them: a pre-labeling run printed one FutureWarning per read."""
    env = os.environ if env is None else env
    if env.get("DIFFJEV_LIBRARY_WARNINGS", "").strip() == "1":
        return
    for category in (FutureWarning, DeprecationWarning, PendingDeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
    for library in LIBRARIES:
        warnings.filterwarnings("ignore", module=rf"{library}(\..*)?$")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # its logger's notices, read when it is imported
    if "transformers" in sys.modules:  # imported already: its logger has read the setting
        sys.modules["transformers"].logging.set_verbosity_error()


class SettingError(ValueError):
    """A setting a person can fix; the message names it and says how."""


def settings_text() -> str:
    width = max(len(s.name) for s in SETTINGS)
    lines = ["settings (environment variables, all optional):"]
    for s in SETTINGS:
        lines.append(f"  {s.name:<{width}}  {s.meaning} (default: {s.default})")
    return "\n".join(lines)


def command_line() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="python app.py",
        description="diffjev studio: annotate in the browser, with pre-labels from a diffusion model. "
        "The page serves at once; the model loads in the background.",
        epilog=settings_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


@dataclass
class Listening:
    """Where the studio listens, and the socket already bound there (so a taken port is found at once)."""

    host: str
    port: int
    sock: socket.socket

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


def listen_port(env: Mapping[str, str]) -> tuple[int, str]:
    """The port and the setting it came from: GRADIO_SERVER_PORT, then PORT, then 7860."""
    for name in PORT_SETTINGS:
        raw = env.get(name, "").strip()
        if not raw:
            continue
        if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= 65535:  # not '²' or full-width digits
            raise SettingError(f"{name}={raw!r} is not a port: give a whole number from 1 to 65535, or unset it")
        return int(raw), name
    return DEFAULT_PORT, PORT_SETTINGS[0]


def listen_host(env: Mapping[str, str]) -> str:
    """GRADIO_SERVER_NAME, else localhost, or every address on a Hugging Face Space (SPACE_ID is set there)."""
    return env.get("GRADIO_SERVER_NAME", "").strip() or (SPACE_HOST if env.get("SPACE_ID") else LOCAL_HOST)


def bind(host: str, port: int, setting: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family)
    except OSError as exc:
        if exc.errno in (98, 48):  # EADDRINUSE on Linux, macOS
            raise SettingError(
                f"port {port} is taken on {host} (another program listens there): set {setting} to a free "
                f"port, e.g. {setting}={port + 1 if port < 65535 else 7860} python app.py"
            ) from None
        raise SettingError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}): check GRADIO_SERVER_NAME and {setting}"
        ) from None


def start_listening(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> Listening:
    """Reads the command line (`--help` prints every setting and exits) and binds the port, or exits with
    one line naming the setting to change."""
    command_line().parse_args(argv)
    env = os.environ if env is None else env
    try:
        port, setting = listen_port(env)
        host = listen_host(env)
        return Listening(host, port, bind(host, port, setting))
    except SettingError as exc:
        raise SystemExit(f"diffjev: {exc}") from None
