"""The Jev decision API's request shape, and the studio's own `POST /v1/systemone`.

The request follows vLLM's `StructuredDecisionRequest`. The studio answers it with its configured
engine, every question in one read where the engine reads canvases, in vLLM's answer shapes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import time
import uuid
from base64 import b64decode
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Callable, Literal

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import HTTPConnection
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, model_validator

from diffjev.auth_throttle import LoginThrottle, Throttled
from diffjev.engines.base import Engine, EngineError
from diffjev.errors import SchemaError
from diffjev.passwords import PasswordBook
from diffjev.read import read
from diffjev.jev import UpstreamError, UpstreamRead, upstream_schema
from diffjev.question_types import LETTERS, Alternative
from diffjev.schema import QUESTION_TYPES, Question, Schema, question_from_dict, staging_from_dict


class JevQuestion(BaseModel):
    """vLLM's QuestionSpec: instructions may be left out or be any JSON (read as text); an unknown field
    passes validation and is refused by `upstream_schema`, with the question's id."""

    model_config = ConfigDict(extra="allow")
    type: str
    instructions: Any = ""
    criteria: Any = None

    def spec(self) -> dict[str, Any]:
        """vLLM's fields and any unknown ones, without diffjev's staging fields."""
        given = {
            name: getattr(self, name) for name in ("type", "instructions", "criteria") if name in self.model_fields_set
        }
        return {**given, **(self.model_extra or {})}


# vLLM's cache salt rule (`validate_cache_salt`): non-empty, at most 128 characters, none of these.
CACHE_SALT_MAX_LENGTH = 128
CACHE_SALT_FORBIDDEN = ("@", "/", "\\", "\x00")


def check_cache_salt(cache_salt: object) -> None:
    if cache_salt is None:
        return
    if not isinstance(cache_salt, str) or not cache_salt:
        raise ValueError("Parameter 'cache_salt' must be a non-empty string if provided.")
    if len(cache_salt) > CACHE_SALT_MAX_LENGTH or any(c in cache_salt for c in CACHE_SALT_FORBIDDEN):
        raise ValueError(
            "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\\\', or NUL."
        )


class StructuredDecisionRequest(BaseModel):
    """vLLM 0.33's request: unknown fields are refused, `joint` is a strict bool, `priority` an int64."""

    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    state: Any
    questions: dict[str, JevQuestion]
    instructions: str | None = None
    images: list[str] | None = None
    audio: list[str] | None = None
    videos: list[str] | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    joint: StrictBool = False
    cache_salt: str | None = None
    priority: int = Field(default=0, ge=-(2**63), le=2**63 - 1)
    request_id: str = Field(default_factory=lambda: uuid.uuid4().hex)  # vLLM's random_uuid

    @model_validator(mode="before")
    @classmethod
    def _check_cache_salt(cls, data: Any) -> Any:
        if isinstance(data, dict):
            check_cache_salt(data.get("cache_salt"))
        return data

    def upstream_schema(self, own_kinds: Mapping[str, Any] | None = None) -> Schema:
        """The questions as vLLM 0.33 reads them; UpstreamError with its message where it refuses one."""
        return upstream_schema({qid: q.spec() for qid, q in self.questions.items()}, self.instructions, own_kinds)


STAGING_FIELDS = {"depends_on", "ask_if", "alone"}
# The studio's own kinds beside vLLM's: span questions, read as text from the item, in diffjev's Jev form.
STUDIO_KINDS = {
    name: functools.partial(question_from_dict, jev_form=True)
    for name, kind in QUESTION_TYPES.items()
    if kind.reads == "span"
}


class StagedJevQuestion(JevQuestion):
    """A question as djev's API takes it: vLLM's fields, and the staging extensions."""

    depends_on: list[str] | None = None
    ask_if: dict[str, str | list[str]] | None = None
    alone: bool | None = None


class StagedDecisionRequest(StructuredDecisionRequest):
    """The studio's request: vLLM's, with questions that may wait for others (`depends_on`, `ask_if`) or
    read alone. vLLM's own endpoint refuses those fields; the stand-in server keeps vLLM's request."""

    questions: dict[str, StagedJevQuestion]

    def schema(self) -> Schema:
        """The questions parsed by vLLM's rules (`upstream_schema`), with their staging; UpstreamError or
        SchemaError with the question and field where one is refused."""
        parsed = self.upstream_schema(STUDIO_KINDS)
        staged = []
        for q in parsed.questions:
            asked = self.questions[q.id]
            given = {k: v for k, v in asked.model_dump(include=STAGING_FIELDS).items() if v is not None}
            staged.append(dataclasses.replace(q, **staging_from_dict(q.id, given)) if given else q)
        return dataclasses.replace(parsed, questions=tuple(staged))


def password_matches(allowed: PasswordBook, username: str, password: str) -> bool:
    """The one password check of the studio's login and the Jev API: a plain password in constant time,
    or a scrypt hash (see diffjev.passwords)."""
    return allowed.matches(username, password)


class BasicLogin:
    """The Jev API's HTTP Basic login: the studio's users and passwords, with the same backoff after failed
    attempts (429 and Retry-After while it lasts). The studio's access gate checks it before a body is read;
    the API's routes check it again (a password checked once is remembered, so that costs little)."""

    def __init__(self, users: list[tuple[str, str]], throttle: LoginThrottle | None = None):
        self.allowed = PasswordBook(users)
        self.throttle = throttle or LoginThrottle.from_env()

    def user(self, connection: HTTPConnection) -> str:
        """The signed-in user, or HTTPException (401 without the right password, 429 while refused)."""
        scheme, _, encoded = connection.headers.get("authorization", "").partition(" ")
        try:
            username, sep, password = b64decode(encoded, validate=True).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            sep = ""
        if scheme.lower() != "basic" or not sep:
            raise HTTPException(401, "Not authenticated", headers={"WWW-Authenticate": "Basic"})
        address = connection.client.host if connection.client else "unknown"
        try:
            ok = self.throttle.check(username, address, lambda: password_matches(self.allowed, username, password))
        except Throttled as exc:
            raise HTTPException(429, str(exc), headers={"Retry-After": str(math.ceil(exc.seconds))}) from None
        if not ok:
            raise HTTPException(401, "wrong user or password", headers={"WWW-Authenticate": "Basic"})
        return username


def basic_auth(login: BasicLogin | None) -> list:
    """With logins configured, every route of the API asks for the user and password (HTTP Basic)."""
    if login is None:
        return []

    def check(request: Request) -> str:
        return login.user(request)

    return [Depends(check)]


def membership(login: Any, may_read: Callable[[str], bool]) -> Any:
    """After the password check (`login`, run once per request and shared), the user must be a member of
    some project: a login alone does not open the API to someone every project has left out."""

    def check(username: str = login) -> None:
        if not may_read(username):
            raise HTTPException(403, f"{username} is not a member of any project")

    return Depends(check)


def error_response(
    message: str, status: int = 400, param: str | None = None, headers: dict[str, str] | None = None
) -> JSONResponse:
    """vLLM's ErrorResponse: `{error: {message, type, param, code}}`, with the status as its code."""
    kind = {
        400: "BadRequestError",
        401: "AuthenticationError",
        403: "PermissionDeniedError",
        404: "NotFoundError",
        429: "RateLimitError",
        503: "ServiceUnavailableError",
    }.get(status, "InternalServerError")
    # `detail` beside vLLM's `error`: what FastAPI's clients and System One clients read; vLLM's ignore it.
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": param, "code": status}, "detail": message},
        status_code=status,
        headers=headers,
    )


def validation_param(errors: Sequence[Any]) -> tuple[str, str | None]:
    """The first validation error as vLLM words it, `"where: what"`, and where (the dotted field path)."""
    first = errors[0] if errors else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    message = str(first.get("msg", "invalid request")).removeprefix("Value error, ")
    if not where and "cache_salt" in message:
        where = "cache_salt"
    return (f"{where}: {message}" if where else message), where or None


class Refused(StarletteHTTPException):
    """A refusal naming the request field at fault (vLLM's ErrorResponse `param`)."""

    def __init__(self, status: int, message: str, param: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(status, message, headers)
        self.param = param


class VLLMErrorRoute(APIRoute):
    """A route that answers as vLLM does when it refuses: a bad body is a 400 ErrorResponse naming the
    field (not FastAPI's 422 `{"detail"}`), and the login, membership and engine refusals keep their status
    in the same shape. Scoped to the Jev API's routes, so the studio's own pages keep their handlers."""

    def get_route_handler(self) -> Callable:
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except RequestValidationError as exc:
                message, param = validation_param(exc.errors())
                return error_response(message, 400, param)
            except StarletteHTTPException as exc:  # FastAPI's own (a body it cannot parse) and the route's
                param = getattr(exc, "param", None)
                return error_response(str(exc.detail), exc.status_code, param, dict(exc.headers or {}))

        return answer


def jev_router(
    engine_now: Callable[[], Engine],
    basic_login: BasicLogin | None = None,
    may_read: Callable[[str], bool] | None = None,
) -> APIRouter:
    login = basic_auth(basic_login)
    dependencies = login + ([membership(login[0], may_read)] if login and may_read else [])
    router = APIRouter(dependencies=dependencies, route_class=VLLMErrorRoute)

    @router.post("/v1/systemone")
    def systemone(request: StagedDecisionRequest, http: Request) -> dict[str, Any]:
        started = time.perf_counter()
        if request.images or request.audio or request.videos:
            raise Refused(400, "this studio reads text states only; send no images, audio or videos", "images")
        try:
            schema = request.schema()
        except UpstreamError as exc:
            raise Refused(400, str(exc), "questions") from None
        except SchemaError as exc:
            raise Refused(
                400, f"questions.{exc.question or ''}{'.' + exc.field if exc.field else ''}: {exc}", "questions"
            ) from None
        try:  # the studio's engine may still be loading, or have failed to: 503, with the reason
            engine = engine_now()
        except EngineError as exc:
            raise HTTPException(503, str(exc), headers={"Retry-After": "10"}) from None
        if request.joint and not getattr(engine, "reads_jointly", False):  # vLLM 0.33 refuses it the same way
            raise Refused(
                400,
                f"joint: this studio's engine ({engine.name}, {engine.model_name}) reads each question on its "
                "own; joint reads need a diffusion model. Send joint false, or point the studio at one",
                "joint",
            )
        try:
            decision = read(schema, request.state, engine)
        except SchemaError as exc:
            raise HTTPException(400, str(exc)) from None
        except EngineError as exc:
            raise HTTPException(503, f"the studio's engine could not read this request: {exc}") from None
        return {
            # vLLM names the read after the caller's X-Request-Id header where one is sent, else request_id.
            "id": f"decision-{http.headers.get('X-Request-Id') or request.request_id}",
            "object": "structured_decision",
            "created": int(time.time()),
            "model": engine.model_name,
            "answers": decision.to_jev(),
            "usage": {
                "input_tokens": len(decision.diagnostics.get("prompt_ids") or []),
                "output_tokens": decision.diagnostics.get("width") or 0,
            },
            "diagnostics": jev_diagnostics(decision),
            # As vLLM 0.33: a single question is never read jointly, so its key is null even when asked.
            "joint": studio_joint(decision) if request.joint and len(schema.questions) > 1 else None,
            "latency_ms": elapsed_ms(started),
        }

    return router


def elapsed_ms(started: float) -> float:
    """Milliseconds since `started` (time.perf_counter): a read's `latency_ms`, which System One clients and
    harnesses read and vLLM's own clients ignore."""
    return round((time.perf_counter() - started) * 1000, 3)


def studio_joint(decision: Any) -> dict[str, Any] | None:
    """vLLM 0.33's `joint` key for the studio's read: every slot question on the template's one canvas
    (per draw), where the engine reads canvases; null where no canvas held slots (span questions alone, or
    an engine that does not say), as vLLM's key is null for a read that was not joint."""
    d = decision.diagnostics
    slots = d.get("slots")
    if not slots or not d.get("width"):
        return None
    return {"canvases": [{"questions": list(slots), "width": d["width"], "slots": list(slots.values())}]}


def jev_diagnostics(decision: Any) -> dict[str, Any]:
    """Per question, label mass and whether the top token was a label; and `skipped`, when a staged
    question was not read, with why (`because`, `was`, `wanted`)."""
    # vLLM's argmax_is_label is a bool: an engine that does not say counts as not shown to be a label.
    diagnostics: dict[str, Any] = {
        qid: {**d, "argmax_is_label": bool(d["argmax_is_label"])} for qid, d in decision.jev_diagnostics().items()
    }
    if decision.diagnostics.get("skipped"):
        diagnostics["skipped"] = decision.diagnostics["skipped"]
    return diagnostics


# --- `POST /v1/decisions`: vLLM 0.33's strict OpenAI-style decision API (vllm/entrypoints/openai/decisions) ---

ShortText = Annotated[StrictStr, Field(max_length=1048576)]
InputText = Annotated[StrictStr, Field(max_length=10485760)]
ChoiceValue = StrictStr | StrictBool


class DecisionModel(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DecisionInputText(DecisionModel):
    type: Literal["input_text"]
    text: InputText


class DecisionInputMessage(DecisionModel):
    role: Literal["user"]
    content: InputText | Annotated[list[DecisionInputText], Field(max_length=16384)]
    type: Literal["message"] = "message"

    @model_validator(mode="before")
    @classmethod
    def _reject_images(cls, data: Any) -> Any:
        content = data.get("content") if isinstance(data, dict) else None
        if isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "input_image" for p in content):
            raise ValueError("Decisions supports text input only; images are not supported")
        return data


class DecisionQuestionBase(DecisionModel):
    instructions: ShortText
    name: ShortText | None = None

    @model_validator(mode="after")
    def _name_is_a_string(self) -> "DecisionQuestionBase":
        if "name" in self.model_fields_set and self.name is None:
            raise ValueError("name must be a string when provided")
        return self


class PredicateQuestion(DecisionQuestionBase):
    type: Literal["predicate"]


class ChoiceOption(DecisionModel):
    value: ChoiceValue
    description: ShortText = ""


class ChoiceQuestion(DecisionQuestionBase):
    type: Literal["choice"]
    choices: list[ChoiceOption] = Field(min_length=2, max_length=255)

    @model_validator(mode="after")
    def _distinct(self) -> "ChoiceQuestion":
        values = [(type(c.value), c.value) for c in self.choices]
        if len(set(values)) != len(values):
            raise ValueError("choice values must be distinct")
        return self


class ScoreLevel(DecisionModel):
    label: ShortText
    description: ShortText = ""


class ScoreQuestion(DecisionQuestionBase):
    type: Literal["score"]
    levels: list[ScoreLevel] = Field(min_length=2, max_length=10)


DecisionQuestion = Annotated[PredicateQuestion | ChoiceQuestion | ScoreQuestion, Field(discriminator="type")]


class DecisionRequest(DecisionModel):
    model: ShortText
    input: InputText | Annotated[list[DecisionInputMessage], Field(max_length=131072)]
    questions: list[DecisionQuestion] = Field(min_length=1, max_length=200)
    safety_identifier: Annotated[StrictStr, Field(max_length=128)] | None = None
    joint: StrictBool = False
    cache_salt: str | None = Field(default=None, min_length=1, max_length=1024)

    @model_validator(mode="before")
    @classmethod
    def _check_cache_salt(cls, data: Any) -> Any:
        if isinstance(data, dict):
            check_cache_salt(data.get("cache_salt"))
        return data

    def input_text(self) -> str:
        """The state the questions are about: the input, or its messages' texts joined (vLLM's input_text)."""
        if isinstance(self.input, str):
            return self.input
        return "\n\n".join(
            m.content if isinstance(m.content, str) else "\n".join(p.text for p in m.content) for m in self.input
        )

    def read_schema(self) -> Schema:
        """The questions as vLLM reads them (adapters.make_read_question): each a choice over lettered
        options, ids "0", "1", ...; a predicate's false / true, a choice's values JSON-encoded, a score's
        level labels. More options than letters: UpstreamError, as vLLM."""
        questions = []
        for i, q in enumerate(self.questions):
            if isinstance(q, PredicateQuestion):
                options: list[tuple[str, str]] = [("false", ""), ("true", "")]
            elif isinstance(q, ChoiceQuestion):
                options = [(json.dumps(c.value, ensure_ascii=False), c.description) for c in q.choices]
            else:
                options = [(level.label, level.description) for level in q.levels]
            if len(options) > len(LETTERS):
                raise UpstreamError(f"This model supports at most {len(LETTERS)} choices per question")
            alternatives = tuple(Alternative(n, label, d or None) for (n, d), label in zip(options, LETTERS))
            questions.append(Question(str(i), "choice", q.instructions, alternatives))
        return Schema(tuple(questions))


def decision_answer(question: Any, read: UpstreamRead) -> dict[str, Any]:
    """One answer in vLLM's shape (adapters.make_answer) from the read's option probabilities."""
    probs, label_mass = read.probs, read.label_mass
    if isinstance(question, PredicateQuestion):
        return {"type": "predicate", "name": question.name, "probability": probs[1]}
    top = max(range(len(probs)), key=probs.__getitem__)
    confidence = probs[top] * label_mass
    if isinstance(question, ChoiceQuestion):
        return {
            "type": "choice",
            "name": question.name,
            "choice": question.choices[top].value,
            "probabilities": [{"value": c.value, "probability": p} for c, p in zip(question.choices, probs)],
            "confidence": confidence,
        }
    return {
        "type": "score",
        "name": question.name,
        "score": sum(i * p for i, p in enumerate(probs)),
        "probabilities": [
            {"value": i, "label": level.label, "probability": p}
            for i, (level, p) in enumerate(zip(question.levels, probs))
        ],
        "confidence": confidence,
    }
