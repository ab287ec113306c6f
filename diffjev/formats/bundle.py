"""A project as another tool holds it, in diffjev's terms: the schema, and per item its text, every
person's answers and every model run's answers. Each interchange format (Label Studio, Argilla, a
diffjev Hub export) reads a file into a Bundle and writes a Bundle out; the services layer stores a
Bundle into a project in one transaction and reads a project back into one. Nothing here touches
storage, so a format is checked on files alone.

Answers are in diffjev's stored form: a label name ("yes", an option, a score level) or, for span
questions, the offsets "12-18,30-35" / "none" with the spans themselves in `spans` (code points into
the item text, end exclusive, as Label Studio, Argilla and spaCy count).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from diffjev.io import SourceError
from diffjev.schema import Schema


class InterchangeError(SourceError):
    """A file that cannot be imported as a whole. The message is one line: the file, the task or record,
    the field, what is wrong and what to do. Nothing of the file is stored."""

    def __init__(self, file: str, where: str | None, field: str | None, problem: str):
        self.file, self.where, self.field, self.problem = file, where, field, problem
        parts = [file] + ([where] if where else []) + ([f"field {field!r}"] if field else [])
        super().__init__(f"{': '.join(parts)}: {problem}")


@dataclass(frozen=True)
class SpanMark:
    """One marked span: `text == item_text[start:end]`."""

    start: int
    end: int
    text: str
    confidence: float | None = None  # a model's, where it gave one


@dataclass(frozen=True)
class HumanAnswer:
    question: str  # the diffjev question id
    annotator: str
    value: str | None  # None where status is "skipped" or "not_asked"
    source: str = "manual"  # accepted / corrected / manual
    status: str = "submitted"  # submitted / skipped / draft / not_asked
    spans: tuple[SpanMark, ...] | None = None  # a span question's answer, beside its offsets in `value`
    skipped: dict[str, Any] | None = None  # not_asked: why ({because, was, wanted}), as diffjev records it
    seconds: float | None = None


@dataclass(frozen=True)
class Adjudication:
    """A reviewer's final answer to one question of the item, settling what the annotators gave: the label
    an export gives. It needs a person's submitted answer to the question beside it."""

    question: str
    reviewer: str
    value: str
    comment: str | None = None
    spans: tuple[SpanMark, ...] | None = None


@dataclass(frozen=True)
class ModelAnswer:
    question: str
    answer: str  # the top answer's name, or a span question's offsets
    distribution: dict[str, float]  # answer name -> probability; {} for span questions and where none was given
    # The tool's score for its answer; None where the file gave none, so no score is written that was not
    # given and none is averaged into another (a prediction's mean score).
    confidence: float | None
    spans: tuple[SpanMark, ...] | None = None


@dataclass(frozen=True)
class RunInfo:
    """A model run: one set of suggestions. `key` names it within the bundle (Label Studio's
    `model_version`, Argilla's suggestion `agent`, a diffjev run id)."""

    key: str
    engine: str
    model: str
    model_version: str | None = None


@dataclass
class Record:
    text: str
    external_id: str | None
    fields: dict[str, Any] = field(default_factory=dict)
    answers: list[HumanAnswer] = field(default_factory=list)
    adjudications: list[Adjudication] = field(default_factory=list)
    predictions: dict[str, list[ModelAnswer]] = field(default_factory=dict)  # run key -> its answers
    # run key -> {question: why it was not read}: a staged question the model's read skipped
    model_skipped: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    where: str = ""  # "task 12", "record 3": how errors name it


@dataclass
class Bundle:
    schema: Schema
    records: list[Record]
    runs: dict[str, RunInfo] = field(default_factory=dict)
    text_field: str = "text"
    source: str = ""  # the file it came from, for messages and the import's listing
    notes: list[str] = field(default_factory=list)  # what the file held that was not taken, said after the import
    # One person's other name -> the name their answers carry here (Label Studio's "ls-user-<id>", which a
    # quick export gives, -> the email a snapshot gives for the same user id): imports under either meet.
    aliases: dict[str, str] = field(default_factory=dict)
    # What the other tool said of the dataset beyond the schema, by tool (Argilla's settings and dataset
    # name): kept with the project, and written back where it still fits the questions.
    tool_settings: dict[str, Any] = field(default_factory=dict)


def score_distribution(names: tuple[str, ...] | list[str], answer: str, score: float) -> dict[str, float]:
    """A tool's one score for its predicted answer as a distribution, the one rule every format uses where
    the file holds no distribution of its own: the answer gets the score, the other answers share the rest
    evenly. A score under an even share (yes at 0.45) would give another answer more than the one the tool
    chose: then the spread is even, and the answer keeps its score as its confidence (ModelAnswer)."""
    if len(names) > 1 and score < 1.0 / len(names):
        return {name: 1.0 / len(names) for name in names}
    rest = (1.0 - score) / (len(names) - 1) if len(names) > 1 else 0.0
    return {name: score if name == answer else rest for name in names}


_RUN_KEY = re.compile(r"run-(\d+)")


def run_names(runs: dict[str, RunInfo], keys: Iterable[str] = ()) -> dict[str, str]:
    """The name each run is shown under in another tool (Label Studio's `model_version`, Argilla's `agent`):
    its model, "model@version" where a version is set and is not the model again, and where two runs would
    share a name each gets " (run 7)" after it. Keys beyond `runs` (a record's run the bundle does not
    describe) are shown as themselves. The bundle's keys stay in diffjev's own extras, which map the names
    back, so a file read again separates its runs as they were."""
    bases: dict[str, str] = {}
    for key in [*runs, *keys]:
        info = runs.get(key)
        if info is None or not info.model:
            bases.setdefault(key, key)
        elif info.model_version and info.model_version != info.model:
            bases[key] = f"{info.model}@{info.model_version}"
        else:
            bases[key] = info.model
    counts = Counter(bases.values())
    names: dict[str, str] = {}
    for key, base in bases.items():
        if counts[base] > 1:
            own = _RUN_KEY.fullmatch(key)
            base = f"{base} (run {own[1] if own else key})"
        name, n = base, 2
        while name in names.values():  # a model whose own name looks like another's "(run N)"
            name, n = f"{base} #{n}", n + 1
        names[key] = name
    return names
