"""Staged questions: `depends_on`, `ask_if` and `alone`, checked across a schema and planned as reads.

A question that depends on others (through `depends_on` or the keys of `ask_if`) is read in a later
stage than they are, with their answers already on its canvas. A question whose `ask_if` is not met is
not read, and not asked: the skip is recorded as `{"because": id, "was": answer or None, "wanted":
[answers]}`. `alone: true` gives a question a read of its own within its stage, so another question's
slot cannot pull it. The functions here are pure: the engines, services and studio call them.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from diffjev.errors import SchemaError
from diffjev.question_types import QUESTION_TYPES

SPAN_KINDS = ("span", "spans")


def is_span(question: Any) -> bool:
    """Whether a question is read as a span of the text (its own read) rather than a label at a slot."""
    kind_type = QUESTION_TYPES.get(question.kind)
    return kind_type.reads == "span" if kind_type is not None else question.kind in SPAN_KINDS


def parents(question: Any) -> tuple[str, ...]:
    """The questions this one waits for: `depends_on`, then the keys of `ask_if`, each once, in order."""
    out = list(question.depends_on)
    out += [other for other, _ in question.ask_if if other not in out]
    return tuple(out)


def is_staged(questions: Sequence[Any]) -> bool:
    """Whether any question waits for another or reads alone: a read takes more than one pass."""
    return any(q.depends_on or q.ask_if or q.alone for q in questions)


def check_stages(questions: Sequence[Any]) -> None:
    """Raise SchemaError, naming the question and the field, for an unknown id, a question waiting for
    itself or for a span question, an `ask_if` answer the question it names does not have, or a cycle."""
    by_id = {q.id: q for q in questions}
    for q in questions:
        for field, others in (("depends_on", q.depends_on), ("ask_if", tuple(o for o, _ in q.ask_if))):
            for other in others:
                _check_parent(q, field, other, by_id)
        for other, wanted in q.ask_if:
            _check_wanted(q, by_id[other], wanted)
    _check_cycles(questions, by_id)


def _check_parent(q: Any, field: str, other: str, by_id: Mapping[str, Any]) -> None:
    if other == q.id:
        raise SchemaError("a question cannot wait for its own answer; remove its own id", question=q.id, field=field)
    if other not in by_id:
        raise SchemaError(
            f"no question has the id {other!r}; the questions are {', '.join(by_id)}", question=q.id, field=field
        )
    if is_span(by_id[other]):
        raise SchemaError(
            f"{other!r} is a span question: its answer is a piece of the text, not a label a later stage can "
            f"build on; wait for a yes_no, choice or score question instead",
            question=q.id,
            field=field,
        )


def _check_wanted(q: Any, other: Any, wanted: Sequence[str]) -> None:
    unknown = [w for w in wanted if w not in other.names]
    if unknown:
        raise SchemaError(
            f"{', '.join(map(repr, unknown))} is not an answer of {other.id!r}; its answers are "
            f"{', '.join(other.names)}",
            question=q.id,
            field="ask_if",
        )


def _check_cycles(questions: Sequence[Any], by_id: Mapping[str, Any]) -> None:
    done: set[str] = set()

    def visit(qid: str, path: list[str]) -> None:
        if qid in done:
            return
        if qid in path:
            loop = path[path.index(qid) :] + [qid]
            first = by_id[loop[0]]
            field = "depends_on" if loop[1] in first.depends_on else "ask_if"
            raise SchemaError(
                f"the questions wait for each other in a circle ({' -> '.join(loop)}); remove one of these links",
                question=loop[0],
                field=field,
            )
        for other in parents(by_id[qid]):
            visit(other, path + [qid])
        done.add(qid)

    for q in questions:
        visit(q.id, [])


def stage_levels(questions: Sequence[Any]) -> tuple[tuple[str, ...], ...]:
    """Question ids by stage, each stage in schema order: a question's stage is one past its latest
    parent's. Assumes `check_stages` passed (no cycles)."""
    by_id = {q.id: q for q in questions}
    level: dict[str, int] = {}

    def of(qid: str) -> int:
        if qid not in level:
            level[qid] = 1 + max((of(p) for p in parents(by_id[qid])), default=-1)
        return level[qid]

    for q in questions:
        of(q.id)
    deepest = max(level.values(), default=-1)
    return tuple(tuple(q.id for q in questions if level[q.id] == n) for n in range(deepest + 1))


def read_groups(questions: Sequence[Any]) -> tuple[tuple[tuple[str, ...], ...], ...]:
    """Per stage, the reads it takes: one joint read of its label questions that do not read alone, then
    one read per `alone` label question. Span questions take their own read and are left out here."""
    by_id = {q.id: q for q in questions}
    stages = []
    for stage in stage_levels(questions):
        labels = [qid for qid in stage if not is_span(by_id[qid])]
        joint = tuple(qid for qid in labels if not by_id[qid].alone)
        alone = [(qid,) for qid in labels if by_id[qid].alone]
        stages.append(tuple(([joint] if joint else []) + alone))
    return tuple(stages)


def model_passes(questions: Sequence[Any], span_read_passes: int = 1) -> int:
    """Model passes one read of an item takes when every question applies (one draw, no re-read): one
    per label read group, and `span_read_passes` per span question."""
    label_reads = sum(len(groups) for groups in read_groups(questions))
    return label_reads + span_read_passes * sum(1 for q in questions if is_span(q))


def waiting_on(questions: Sequence[Any], qid: str) -> list[Any]:
    """The questions that wait for `qid`, directly or through others, in schema order: the ones an answer
    to `qid` can ask or drop."""
    later: set[str] = {qid}
    for stage in stage_levels(questions):  # a question's parents sit in earlier stages
        later.update(q.id for q in questions if q.id in stage and set(parents(q)) & later)
    return [q for q in questions if q.id in later and q.id != qid]


def skip_record(question: Any, answers: Mapping[str, str | None]) -> dict[str, Any] | None:
    """Why `question` is not asked given the answers so far (answer names; None or absent when a question
    has none, e.g. it was skipped itself), or None when it applies. The first unmet condition is named."""
    for other, wanted in question.ask_if:
        was = answers.get(other)
        if was not in wanted:
            return {"because": other, "was": was, "wanted": list(wanted)}
    return None


def skips(questions: Sequence[Any], answers: Mapping[str, str | None]) -> dict[str, dict[str, Any]]:
    """Every question that does not apply given `answers`, with its skip record, in stage order: a
    question skipped itself counts as unanswered for the questions after it, whatever `answers` holds."""
    by_id = {q.id: q for q in questions}
    known = dict(answers)
    out: dict[str, dict[str, Any]] = {}
    for stage in stage_levels(questions):
        for qid in stage:
            record = skip_record(by_id[qid], known)
            if record is not None:
                out[qid] = record
                known[qid] = None
    return out


def read_in_stages(
    questions: Sequence[Any],
    count: int,
    read_group: Callable[[int, tuple[str, ...], list[int], list[dict[str, Any]]], Sequence[Mapping[str, Any]]],
) -> tuple[list[dict[str, Any]], list[dict[str, dict[str, Any]]]]:
    """Read `count` items stage by stage, the one loop every engine's staged read goes through, so a
    question whose `ask_if` fails is never read, whatever the engine.

    For each read group (numbered from 0 across the stages), `read_group(number, question ids, items,
    earlier answers)` reads the group's questions that apply to those items (items grouped by which of
    the group's questions apply to them) and returns, per item, {question id: answer} where an answer
    carries its name in `.answer`. A stage's reads see only the earlier stages' answers, so an `alone`
    question is not pulled by its own stage's joint read. Returns, per item, the answers and the skip
    records of the questions not read."""
    answers: list[dict[str, Any]] = [{} for _ in range(count)]
    skipped: list[dict[str, dict[str, Any]]] = [{} for _ in range(count)]
    by_id = {q.id: q for q in questions}
    number = 0
    for stage in read_groups(questions):
        before = [dict(a) for a in answers]
        for group in stage:
            asked: dict[tuple[str, ...], list[int]] = {}  # the group's applicable questions -> items
            for i in range(count):
                known = {qid: a.answer for qid, a in before[i].items()}
                wanted = []
                for qid in group:
                    record = skip_record(by_id[qid], known)
                    if record is None:
                        wanted.append(qid)
                    else:
                        skipped[i][qid] = record
                if wanted:
                    asked.setdefault(tuple(wanted), []).append(i)
            for qids, items in asked.items():
                got = read_group(number, qids, items, [before[i] for i in items])
                for i, group_answers in zip(items, got):
                    answers[i].update(group_answers)
            number += 1
    return answers, skipped
