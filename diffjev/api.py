"""The Jev decision API's request shape, and the studio's own `POST /v1/systemone`.

The request follows vLLM's `StructuredDecisionRequest`. The studio answers it with its configured
engine, every question in one read where the engine reads canvases, in vLLM's answer shapes.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from typing import Annotated, Any, Callable, Literal

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.security import HTTPBasic, HTTPBasicCredentials
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, model_validator

from diffjev.auth_throttle import LoginThrottle, Throttled
from diffjev.engines.base import Engine, EngineError
from diffjev.errors import SchemaError
from diffjev.passwords import PasswordBook
from diffjev.read import read
from diffjev.schema import Schema


class JevQuestion(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: str
    instructions: str
    criteria: Any = None


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

    def schema(self) -> Schema:
        """The request's questions as a Schema; a bad one raises SchemaError."""
        return Schema.from_dict(
            {
                "questions": {qid: q.model_dump(exclude_none=True) for qid, q in self.questions.items()},
                **({"instructions": self.instructions} if self.instructions else {}),
                "samples": 1,
            }
        )


class StagedJevQuestion(JevQuestion):
    """A question as djev's API takes it: vLLM's fields, and the staging extensions."""

    depends_on: list[str] | None = None
    ask_if: dict[str, str | list[str]] | None = None
    alone: bool | None = None


class StagedDecisionRequest(StructuredDecisionRequest):
    """The studio's request: vLLM's, with questions that may wait for others (`depends_on`, `ask_if`) or
    read alone. vLLM's own endpoint refuses those fields; the stand-in server keeps vLLM's request."""

    questions: dict[str, StagedJevQuestion]


def password_matches(allowed: PasswordBook, username: str, password: str) -> bool:
    """The one password check of the studio's login and the Jev API: a plain password in constant time,
    or a scrypt hash (see diffjev.passwords)."""
    return allowed.matches(username, password)


def basic_auth(users: list[tuple[str, str]] | None, throttle: LoginThrottle | None = None) -> list:
    """With logins configured, the API asks for the same user and password (HTTP Basic), with the same
    backoff after failed attempts (429 and Retry-After while it lasts)."""
    if not users:
        return []
    allowed = PasswordBook(users)
    throttle = throttle or LoginThrottle.from_env()
    security = HTTPBasic()

    def check(request: Request, credentials: HTTPBasicCredentials = Depends(security)) -> str:
        address = request.client.host if request.client else "unknown"
        try:
            ok = throttle.check(
                credentials.username,
                address,
                lambda: password_matches(allowed, credentials.username, credentials.password),
            )
        except Throttled as exc:
            raise HTTPException(429, str(exc), headers={"Retry-After": str(math.ceil(exc.seconds))}) from None
        if not ok:
            raise HTTPException(401, "wrong user or password", headers={"WWW-Authenticate": "Basic"})
        return credentials.username

    return [Depends(check)]


def membership(login: Any, may_read: Callable[[str], bool]) -> Any:
    """After the password check (`login`, run once per request and shared), the user must be a member of
    some project: a login alone does not open the API to someone every project has left out."""

    def check(username: str = login) -> None:
        if not may_read(username):
            raise HTTPException(403, f"{username} is not a member of any project")

    return Depends(check)


def jev_router(
    engine_now: Callable[[], Engine],
    users: list[tuple[str, str]] | None = None,
    throttle: LoginThrottle | None = None,
    may_read: Callable[[str], bool] | None = None,
) -> APIRouter:
    login = basic_auth(users, throttle)
    router = APIRouter(dependencies=login + ([membership(login[0], may_read)] if login and may_read else []))

    @router.post("/v1/systemone")
    def systemone(request: StagedDecisionRequest) -> dict[str, Any]:
        if request.images or request.audio or request.videos:
            raise HTTPException(422, [{"loc": ["body", "images"], "msg": "this server reads text states only"}])
        try:
            schema = request.schema()
        except SchemaError as exc:
            loc = ["body", "questions"] + ([exc.question] if exc.question else []) + ([exc.field] if exc.field else [])
            raise HTTPException(422, [{"loc": loc, "msg": str(exc), "type": "value_error"}]) from None
        try:  # the studio's engine may still be loading, or have failed to: 503, with the reason
            engine = engine_now()
        except EngineError as exc:
            raise HTTPException(503, str(exc), headers={"Retry-After": "10"}) from None
        try:
            decision = read(schema, request.state, engine)
        except (EngineError, SchemaError) as exc:
            raise HTTPException(502 if isinstance(exc, EngineError) else 422, str(exc)) from None
        return {
            "id": f"sd-{uuid.uuid4().hex}",
            "object": "structured_decision",
            "created": int(time.time()),
            "model": engine.model_name,
            "answers": decision.to_jev(),
            "usage": {
                "input_tokens": len(decision.diagnostics.get("prompt_ids") or []),
                "output_tokens": decision.diagnostics.get("width") or 0,
            },
            "diagnostics": jev_diagnostics(decision),
        }

    return router


def jev_diagnostics(decision: Any) -> dict[str, Any]:
    """Per question, label mass and whether the top token was a label; and `skipped`, when a staged
    question was not read, with why (`because`, `was`, `wanted`)."""
    diagnostics: dict[str, Any] = decision.jev_diagnostics()
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
        options, a predicate's false / true, a choice's values JSON-encoded, a score's level labels."""
        questions = []
        for i, q in enumerate(self.questions):
            if isinstance(q, PredicateQuestion):
                options: list[Any] = ["false", "true"]
            elif isinstance(q, ChoiceQuestion):
                options = [_option(json.dumps(c.value, ensure_ascii=False), c.description) for c in q.choices]
            else:
                options = [_option(level.label, level.description) for level in q.levels]
            questions.append({"id": f"q{i}", "type": "choice", "instructions": q.instructions, "options": options})
        return Schema.from_dict({"questions": questions, "samples": 1})


def _option(name: str, description: str) -> Any:
    return {"name": name, "description": description} if description else name


def decision_answer(question: Any, probs: list[float], label_mass: float) -> dict[str, Any]:
    """One answer in vLLM's shape (adapters.make_answer) from the read's option probabilities."""
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
