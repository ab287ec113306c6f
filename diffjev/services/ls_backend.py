"""Label Studio's ML backend interface over a diffjev engine: a team keeps Label Studio as its front end
and gets diffjev reads as pre-labels.

Label Studio (label_studio/ml/api_connector.py, `MLApi`) calls a backend at these routes; the shapes here
follow it and the reference server (label-studio-ml-backend, label_studio_ml/api.py):

- `GET /health` (and `GET /`): `{"status": "UP", "model_class": ...}`; Label Studio's connection check.
- `POST /setup` with `{"project": "<id>.<created>", "schema": <label config XML>, "hostname", "access_token"}`:
  answers `{"model_version": ...}`. A config with a tag diffjev cannot hold is refused here, when the
  backend is connected, with a 400 naming the tag.
- `POST /predict` with `{"tasks": [{"id", "data": {...}}, ...], "model_version", "project", "label_config",
  "params": {...}}`: answers `{"results": [...]}`, one prediction per task in task order
  (`{"result": [...], "score", "model_version"}`); Label Studio stores `result`, `score` and
  `model_version` of each and reads nothing else. A task diffjev cannot read (no text, a text past the
  item cap) gets an empty prediction whose `error` says why, so the other tasks still get theirs and the
  results stay one per task, as Label Studio requires.
- `POST /webhook`: Label Studio's training events; diffjev does not train from them, so it answers 200
  with `{"status": "ignored"}`.
- `GET /versions`: the one model version this backend serves; `GET /metrics`: `{}`.

A whole request that cannot be answered (a config that does not parse, too many tasks, a bad body) gets
an HTTP error whose JSON `{"error": ...}` is one line naming the field, the way the reference backend
reports errors. Nothing answers a bare text error: a body or config nested too deep to read is a 400, an
unexpected failure a 500 `{"error": ...}` logged once with its traceback.

Size: a body past the cap (`max_body_bytes`, `serve-ls-backend --max-body-mb`; by default room for
`max_tasks` tasks whose texts are at the item cap) is refused with a 413 before it is read in full, by its
Content-Length or, for a chunked body, as soon as it passes the cap; the tasks of /predict are counted as
they are parsed, so a request with too many is refused without parsing the rest.

Authentication: Label Studio sends a backend HTTP basic auth when the connection's "Authentication
method" is "Basic Authentication" (its `auth_method`, `basic_auth_user`, `basic_auth_pass`). With an
API key, this backend answers only requests whose basic-auth password is the key (any user name), or
that carry `Authorization: Bearer <key>`; others get a 401, which Label Studio shows as wrong
authentication parameters.

Every prediction is read with one engine and one seed, so the same text and config give the same
prediction each time; `model_version` is "diffjev-<engine>-<model>", one token of letters, digits, '.',
'_' and '-'.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import logging
import threading
from collections import OrderedDict
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from diffjev.decide import Decision
from diffjev.engines.base import DEFAULT_SEED, Engine, EngineError
from diffjev.formats.bundle import ModelAnswer, SpanMark
from diffjev.formats.labelstudio import LabelConfig, diffjev_model_version, schema_from_config, task_predictions
from diffjev.io import SourceError
from diffjev.read import read_many
from diffjev.services.importing import max_item_chars
from diffjev.spans import SpanAnswer

DEFAULT_MAX_TASKS = 100
MODEL_CLASS = "diffjev"
CONFIGS_KEPT = 16  # parsed label configs kept: a backend usually serves one project, a few at most
# A text reaches the backend JSON-encoded, and Label Studio's client (requests' `json=`) escapes every
# non-ASCII character as \uXXXX: up to 6 bytes a character. Around each text a task carries its other data,
# meta and earlier predictions, and the request its label config.
BYTES_PER_CHAR = 6
TASK_ALLOWANCE = 64 * 1024
REQUEST_ALLOWANCE = 1024 * 1024
MB = 1024 * 1024

log = logging.getLogger(__name__)


class BackendError(Exception):
    """A request this backend refuses as a whole: answered as `{"error": message}` with `status`."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.message, self.status = message, status


def model_version_of(engine: Engine) -> str:
    """The version Label Studio records on each prediction, `diffjev-<engine>-<model>` as one token
    (Label Studio lists and filters predictions by it): stable for one engine and model, and the same as
    an export of this engine's runs gives them."""
    return diffjev_model_version(engine.name, engine.model_name)


def model_answers(decision: Decision) -> list[ModelAnswer]:
    """A read's answers in the interchange form, in schema order; a staged question the read skipped
    has no answer and no entry."""
    out = []
    for question in decision.schema.questions:
        answer = decision.answers.get(question.id)
        if answer is None:
            continue
        if isinstance(answer, SpanAnswer):
            spans = tuple(SpanMark(s.start, s.end, s.text, s.confidence) for s in answer.spans)
            out.append(ModelAnswer(question.id, answer.answer, {}, answer.confidence, spans))
        else:
            out.append(ModelAnswer(question.id, answer.answer, dict(answer.probabilities), answer.confidence))
    return out


def _authorized(header: str, api_key: str) -> bool:
    """Bearer <key>, or basic auth with the key as password. Compared in constant time, so the key
    cannot be guessed a character at a time."""
    expected = api_key.encode()
    scheme, _, credentials = header.partition(" ")
    credentials = credentials.strip()
    if scheme.lower() == "bearer":
        return hmac.compare_digest(credentials.encode("utf-8", "surrogateescape"), expected)
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(credentials, validate=True)
        except (binascii.Error, ValueError):
            return False
        _, colon, password = decoded.partition(b":")
        return bool(colon) and hmac.compare_digest(password, expected)
    return False


def default_max_body_bytes(max_tasks: int, text_cap: int) -> int:
    """Room for `max_tasks` tasks whose texts are at the item cap, each escaped at its longest."""
    return max_tasks * (text_cap * BYTES_PER_CHAR + TASK_ALLOWANCE) + REQUEST_ALLOWANCE


def _too_deep(what: str) -> BackendError:
    return BackendError(f"{what} nests deeper than this backend reads; Label Studio's own nest a few levels")


_DECODER = json.JSONDecoder()
_SPACE = frozenset(" \t\n\r")


def _skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _SPACE:
        pos += 1
    return pos


def _json_value(text: str, pos: int) -> tuple[Any, int]:
    """One JSON value at `pos` and where it ends. The C decoder recurses once a level and raises
    RecursionError past Python's limit, which is a body too deep, not a failure of the backend."""
    try:
        return _DECODER.raw_decode(text, pos)
    except json.JSONDecodeError as exc:
        raise BackendError(f"the request body is not JSON: {exc.msg} at character {exc.pos}") from None
    except RecursionError:
        raise _too_deep("the request body's JSON") from None


def _expect(text: str, pos: int, char: str) -> int:
    pos = _skip_space(text, pos)
    if text[pos : pos + 1] != char:
        found = repr(text[pos]) if pos < len(text) else "the end of the body"
        raise BackendError(f"the request body is not JSON: expected {char!r} at character {pos}, found {found}")
    return pos + 1


def _task_list(text: str, pos: int, max_tasks: int) -> tuple[list[Any], int]:
    """The 'tasks' array starting at `pos` ('['), parsed a task at a time so that a request with more
    than `max_tasks` is refused before the rest are parsed."""
    tasks: list[Any] = []
    pos = _skip_space(text, pos + 1)
    if text[pos : pos + 1] == "]":
        return tasks, pos + 1
    while True:
        if len(tasks) == max_tasks:
            raise BackendError(
                f"field 'tasks': more than this backend's {max_tasks} tasks in one request "
                f"(serve-ls-backend --max-tasks); send fewer at a time",
                413,
            )
        task, pos = _json_value(text, _skip_space(text, pos))
        tasks.append(task)
        pos = _skip_space(text, pos)
        if text[pos : pos + 1] == "]":
            return tasks, pos + 1
        pos = _expect(text, pos, ",")


def parse_body(raw: bytes, *, max_tasks: int | None = None) -> dict[str, Any]:
    """The request's JSON object. With `max_tasks`, its 'tasks' list is counted while it is parsed.
    The object's members are parsed one by one with the standard decoder, so a member holds exactly
    what `json.loads` would give (the last of a repeated name wins, as there)."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BackendError(f"the request body is not UTF-8 JSON: a bad byte at byte {exc.start}") from None
    pos = _skip_space(text, 0)
    if text[pos : pos + 1] != "{":
        _json_value(text, pos)  # says what is wrong when the body is not JSON at all
        raise BackendError("the request body must be a JSON object")
    body: dict[str, Any] = {}
    pos = _skip_space(text, pos + 1)
    if text[pos : pos + 1] == "}":
        pos += 1
    else:
        while True:
            name, pos = _json_value(text, _skip_space(text, pos))
            if not isinstance(name, str):
                raise BackendError(f"the request body is not JSON: a member name is not a string at character {pos}")
            pos = _skip_space(text, _expect(text, pos, ":"))
            if name == "tasks" and max_tasks is not None and text[pos : pos + 1] == "[":
                body[name], pos = _task_list(text, pos, max_tasks)
            else:
                body[name], pos = _json_value(text, pos)
            pos = _skip_space(text, pos)
            if text[pos : pos + 1] == "}":
                pos += 1
                break
            pos = _expect(text, pos, ",")
    pos = _skip_space(text, pos)
    if pos != len(text):
        raise BackendError(f"the request body is not JSON: extra data at character {pos}")
    return body


def _task_where(task: Any, n: int) -> str:
    task_id = task.get("id") if isinstance(task, dict) else None
    return f"task {task_id}" if task_id is not None else f"task #{n + 1} of the request"


def create_ls_backend(
    engine: Engine,
    *,
    api_key: str | None = None,
    max_tasks: int = DEFAULT_MAX_TASKS,
    max_chars: int | None = None,
    max_body_bytes: int | None = None,
    seed: int = DEFAULT_SEED,
) -> FastAPI:
    """The ML backend app reading with `engine`. `max_chars` (default: the import's item cap,
    $DIFFJEV_MAX_ITEM_CHARS) bounds a task's text, as an imported item's is bounded; `max_body_bytes`
    (default: `default_max_body_bytes`) a request body."""
    app = FastAPI(title="diffjev: Label Studio ML backend")
    model_version = model_version_of(engine)
    text_cap = max_chars or max_item_chars()
    body_cap = max_body_bytes or default_max_body_bytes(max_tasks, text_cap)
    engine_lock = threading.Lock()  # an in-process model reads one batch at a time
    configs: OrderedDict[str, LabelConfig] = OrderedDict()

    if api_key:

        @app.middleware("http")
        async def _check_auth(request: Request, call_next):
            if not _authorized(request.headers.get("authorization", ""), api_key):
                return JSONResponse(
                    {
                        "error": "this ML backend needs its API key: in Label Studio, choose Basic Authentication "
                        "with the key as the password"
                    },
                    status_code=401,
                    headers={"WWW-Authenticate": 'Basic realm="diffjev"'},
                )
            return await call_next(request)

    # Added last, so it wraps the others: whatever fails anywhere is answered in the same JSON shape.
    @app.middleware("http")
    async def _unexpected_error(request: Request, call_next):
        try:
            return await call_next(request)
        except Exception as exc:
            log.exception("%s %s failed", request.method, request.url.path)
            first_line = (str(exc).splitlines() or [""])[0]
            return JSONResponse(
                {"error": f"the backend failed on {request.url.path}: {type(exc).__name__}: {first_line}"},
                status_code=500,
            )

    @app.exception_handler(BackendError)
    async def _backend_error(_: Request, exc: BackendError) -> JSONResponse:
        return JSONResponse({"error": exc.message}, status_code=exc.status)

    def label_config(xml: Any, field: str) -> LabelConfig:
        if not isinstance(xml, str) or not xml.strip():
            raise BackendError(f"field {field!r}: give the project's label config XML")
        if xml in configs:
            configs.move_to_end(xml)
            return configs[xml]
        try:
            config = schema_from_config(xml, file=f"the request's {field!r}")
        except SourceError as exc:  # InterchangeError names the tag diffjev cannot hold
            raise BackendError(str(exc)) from None
        except RecursionError:  # a config read by recursion past Python's limit
            raise _too_deep(f"field {field!r}: the label config") from None
        configs[xml] = config
        while len(configs) > CONFIGS_KEPT:
            configs.popitem(last=False)
        return config

    def too_large() -> BackendError:
        return BackendError(
            f"the request body is larger than this backend's {body_cap / MB:.1f} MB "
            f"(serve-ls-backend --max-body-mb); send fewer tasks at a time",
            413,
        )

    async def json_body(request: Request, max_tasks: int | None = None) -> dict[str, Any]:
        declared = request.headers.get("content-length", "").strip()
        if declared.isdigit() and int(declared) > body_cap:
            raise too_large()  # refused before a byte of it is read
        raw = bytearray()
        async for chunk in request.stream():  # a chunked body has no length: stop once it passes the cap
            raw += chunk
            if len(raw) > body_cap:
                raise too_large()
        return parse_body(bytes(raw), max_tasks=max_tasks)

    def task_text(config: LabelConfig, task: Any, n: int) -> tuple[str | None, str | None]:
        """The task's text, or None and why not."""
        where = _task_where(task, n)
        field = config.text_field
        data = task.get("data") if isinstance(task, dict) else None
        if not isinstance(data, dict):
            return None, f"{where}: field 'data': the task has no data object"
        text = data.get(field)
        if not isinstance(text, str) or not text.strip():
            return None, (
                f"{where}: field 'data.{field}': no text to read (the label config reads ${field}); "
                f"add the text under data.{field}"
            )
        if len(text) > text_cap:
            return None, (
                f"{where}: field 'data.{field}': the text has {len(text)} characters, more than the "
                f"{text_cap} diffjev reads (DIFFJEV_MAX_ITEM_CHARS); shorten or split it"
            )
        return text, None

    def predict(config: LabelConfig, tasks: list[Any]) -> list[dict[str, Any]]:
        texts: dict[int, str] = {}
        results: list[dict[str, Any] | None] = []
        for n, task in enumerate(tasks):
            text, problem = task_text(config, task, n)
            if problem is not None:
                results.append({"result": [], "score": None, "model_version": model_version, "error": problem})
            else:
                texts[n] = text
                results.append(None)
        if texts:
            order = list(texts)
            try:
                with engine_lock:
                    decisions = list(read_many(config.schema, [texts[n] for n in order], engine, seed=seed))
            except EngineError as exc:
                raise BackendError(f"the engine could not read: {exc}", 502) from None
            for n, decision in zip(order, decisions):
                results[n] = task_predictions(config, model_answers(decision), model_version, texts[n])
        return results  # type: ignore[return-value]  # every slot is filled above

    @app.get("/")
    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "UP", "model_class": MODEL_CLASS, "model_version": model_version}

    @app.get("/metrics")
    async def metrics() -> dict[str, Any]:
        return {}

    @app.get("/versions")
    async def versions() -> dict[str, Any]:
        return {"versions": [model_version], "model_version": model_version}

    @app.post("/setup")
    async def setup(request: Request) -> dict[str, Any]:
        body = await json_body(request)
        label_config(body.get("schema"), "schema")
        return {"model_version": model_version}

    @app.post("/predict")
    async def predict_route(request: Request) -> dict[str, Any]:
        body = await json_body(request, max_tasks=max_tasks)  # refuses more than max_tasks tasks
        tasks = body.get("tasks")
        if not isinstance(tasks, list):
            raise BackendError("field 'tasks': give a list of tasks, each with its 'data'")
        config = label_config(body.get("label_config"), "label_config")
        return {"results": await run_in_threadpool(predict, config, tasks)}

    @app.post("/webhook")
    async def webhook(request: Request) -> dict[str, Any]:
        body = await json_body(request)
        action = body.get("action")  # echoed only as the event name it is, never a nested value
        return {
            "status": "ignored",
            "action": action if isinstance(action, str) else None,
            "detail": "diffjev does not train from events",
        }

    return app
