"""The shapes of what diffjev writes into another tool's records beside that tool's own fields: Label Studio's
task `meta.diffjev` and Argilla's record `metadata.diffjev`. Both carry the same facts (runs, a run's answers
with their distributions, a model's skips, a person's answer status and time), so one set of models describes
them; each format names the place where its copy sits.

Another tool keeps these keys without reading them, and people edit exports by hand, so a key can hold
anything. `checked` reads one against its model and refuses a wrong shape with one InterchangeError line that
names the field by its dotted path (meta.diffjev.runs.<key>.model), what is wrong, and the fix.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from diffjev.formats.bundle import InterchangeError, ModelAnswer, RunInfo, SpanMark

Probability = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Offset = Annotated[int, Field(ge=0)]
Status = Literal["submitted", "skipped", "draft", "not_asked"]
Source = Literal["accepted", "corrected", "manual"]


class Shape(BaseModel):
    # strict: "0.5" is no number and true no offset; keys diffjev does not know are left alone
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class Span(Shape):
    """One marked span: Label Studio's meta writes [start, end, text, confidence], Argilla's an object."""

    start: Offset
    end: Offset
    text: str
    confidence: Probability | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_list(cls, raw: Any) -> Any:
        if isinstance(raw, (list, tuple)):
            if len(raw) != 4:
                raise ValueError(f"a span is [start, end, text, confidence], not {len(raw)} items")
            return dict(zip(("start", "end", "text", "confidence"), raw))
        return raw

    @model_validator(mode="after")
    def _ordered(self) -> Span:
        if self.end <= self.start:
            raise ValueError(f"a span ends after it starts, not {self.start}-{self.end}")
        return self

    def mark(self) -> SpanMark:
        return SpanMark(self.start, self.end, self.text, self.confidence)


def marks(spans: list[Span] | None) -> tuple[SpanMark, ...] | None:
    return None if spans is None else tuple(s.mark() for s in spans)


class Skip(Shape):
    """Why a staged question was not asked or not read: {because, was, wanted}."""

    because: str | None = None
    was: str | None = None
    wanted: list[str] = []

    def record(self) -> dict[str, Any]:
        return self.model_dump(exclude_unset=True)


def skips(raw: dict[str, Skip]) -> dict[str, dict[str, Any]]:
    return {qid: skip.record() for qid, skip in raw.items()}


class Run(Shape):
    engine: str
    model: str
    model_version: str | None = None
    name: str | None = None  # what the tool shows for the run (bundle.run_names), where it is not the key

    def info(self, key: str) -> RunInfo:
        return RunInfo(key, self.engine, self.model, self.model_version)


class ModelAnswerShape(Shape):
    answer: str
    distribution: dict[str, Probability] = {}
    confidence: Probability | None
    spans: list[Span] | None = None

    def model_answer(self, qid: str) -> ModelAnswer:
        return ModelAnswer(qid, self.answer, dict(self.distribution), self.confidence, marks(self.spans))


class HumanFacts(Shape):
    """What an answer holds beyond its value."""

    source: Source = "manual"
    status: Status | None = None
    skipped: Skip | None = None
    seconds: Seconds | None = None


# --- Label Studio: the task's meta.diffjev ------------------------------------------------------------------------


class LabelStudioAnswer(HumanFacts):
    value: str | None = None
    spans: list[Span] | None = None


class LabelStudioAnnotation(Shape):
    annotator: Annotated[str, Field(min_length=1)] | None = None
    answers: dict[str, LabelStudioAnswer | None] = {}


class LabelStudioRun(Shape):
    answers: dict[str, ModelAnswerShape | None] = {}
    skipped: dict[str, Skip] = {}


class LabelStudioMeta(Shape):
    external_id: Any = None
    annotations: list[LabelStudioAnnotation] = []
    adjudications: Any = None  # each one is checked where it is read, with its own messages
    predictions: dict[str, LabelStudioRun] = {}
    runs: dict[str, Run] = {}

    @field_validator("external_id")
    @classmethod
    def _an_id(cls, value: Any) -> str | None:
        # an item id is text or a whole number, as a plain import takes it; str() of anything else is no id
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
        raise ValueError("an item id is text or a whole number")


# --- Argilla: the record's metadata.diffjev -----------------------------------------------------------------------


class ArgillaAnswerFacts(HumanFacts):
    question: str
    annotator: Annotated[str, Field(min_length=1)]


class ArgillaModelAnswer(ModelAnswerShape):
    question: str


class ArgillaExtras(Shape):
    annotators: dict[str, str] = {}
    answers: list[ArgillaAnswerFacts] = []
    runs: dict[str, Run] = {}
    predictions: dict[str, list[ArgillaModelAnswer]] = {}
    model_skipped: dict[str, dict[str, Skip]] = {}
    adjudications: Any = None  # each one is checked where it is read, with its own messages


S = TypeVar("S", bound=Shape)


def checked(shape: type[S], raw: Any, file: str, where: str | None, at: str, fix: str) -> S:
    """`raw` read as `shape`; else one InterchangeError naming the first wrong field by its path under `at`."""
    try:
        return shape.model_validate(raw)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        path = ".".join([at, *(str(part) for part in error["loc"])])
        message = re.sub(r" or instance of \w+$", "", error["msg"].removeprefix("Value error, "))
        message = message[:1].lower() + message[1:]
        if error["type"] != "missing":
            message = f"{_shown(error['input'])}: {message}"
        raise InterchangeError(file, where, path, f"{message}; {fix}") from None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_SURROGATE = re.compile("[\ud800-\udfff]")
LONE_SURROGATE = (
    "a lone surrogate escape (such as \\ud800) is not valid Unicode; write the whole surrogate pair or remove it"
)


def surrogate_path(value: Any) -> str | None:
    """The dotted path of the first string (a value or a key) in parsed JSON that holds a lone surrogate escape,
    which JSON allows and no database or UTF-8 file can hold; None where there is none."""
    pending: list[tuple[Any, str]] = [(value, "")]
    while pending:  # a stack, not recursion: the file decides how deep it nests
        item, path = pending.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return path
        elif isinstance(item, dict):
            for key, inner in item.items():
                inner_path = f"{path}.{key}" if path else str(key)
                if isinstance(key, str) and _SURROGATE.search(key):
                    return inner_path
                pending.append((inner, inner_path))
        elif isinstance(item, list):
            pending.extend((inner, f"{path}.{n}" if path else str(n)) for n, inner in enumerate(item))
    return None
