"""From slot logprobs to answers: distributions, confidence, uncertainty, and agreement across draws.

All logprobs here are full-vocabulary log-probabilities at temperature 1 (what a read-only step returns).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from diffjev.question_types import QUESTION_TYPES
from diffjev.schema import Question, Schema

# A label the server did not return sits below everything it did return; djev uses the same rule.
MISSING_LABEL_GAP = 5.0


@dataclass(frozen=True)
class SlotRead:
    """What one read returned at one slot."""

    logprobs: Mapping[int, float]  # token id -> full-vocabulary logprob
    argmax: int | None = None  # the most likely token at the slot over the whole vocabulary, when known


@dataclass(frozen=True)
class SlotDistribution:
    """One draw's distribution for one question, renormalised over its labels."""

    probs: tuple[float, ...]  # in answer order
    label_mass: float  # share of the full-vocabulary mass on the labels
    argmax_is_label: bool | None
    missing_labels: tuple[str, ...] = ()

    @property
    def entropy(self) -> float:
        return entropy(self.probs)


@dataclass(frozen=True)
class Answer:
    question_id: str
    kind: str
    answer: str  # the top answer's name
    probabilities: dict[str, float]  # answer name -> mean renormalised probability
    confidence: float  # probabilities[answer]
    entropy: float  # nats, of `probabilities`
    margin: float  # top probability minus the runner-up's
    label_mass: float  # mean share of full-vocabulary mass on the labels
    draws: int
    stderr: float | None = None  # standard error of the top probability across draws (n > 1)
    agreement: float | None = None  # share of draws whose own top answer is `answer` (n > 1)
    argmax_is_label: bool | None = None  # in the first draw, was the vocabulary's top token a label
    draw_entropies: tuple[float, ...] = ()

    @property
    def full_vocab_confidence(self) -> float:
        """Upstream's `confidence`: the chosen label's probability over the whole vocabulary."""
        return self.confidence * self.label_mass

    @property
    def value(self) -> float | None:
        """P(yes) for yes/no, the 0-indexed expected level for a score, None for a choice."""
        return QUESTION_TYPES[self.kind].answer_value(self)

    def to_dict(self) -> dict[str, Any]:
        return {
            "question_id": self.question_id,
            "kind": self.kind,
            "answer": self.answer,
            "probabilities": dict(self.probabilities),
            "confidence": self.confidence,
            "entropy": self.entropy,
            "margin": self.margin,
            "label_mass": self.label_mass,
            "draws": self.draws,
            "stderr": self.stderr,
            "agreement": self.agreement,
            "argmax_is_label": self.argmax_is_label,
            "draw_entropies": list(self.draw_entropies),
            "value": self.value,
        }

    def to_jev(self, question: Question) -> dict[str, Any]:
        """vLLM's `/v1/systemone` answer shape for this question."""
        return question.type.to_jev(self, question)


@dataclass
class Decision:
    """The answers to every question of a schema for one item, with what it took to read them."""

    answers: dict[str, Answer]
    schema: Schema
    diagnostics: dict[str, Any] = field(default_factory=dict)

    def to_jev(self) -> dict[str, dict[str, Any]]:
        """The answers in vLLM's `/v1/systemone` shapes, keyed by question id, in schema order; a staged
        question that was not read (its `ask_if` not met) is `null`, as the Jev API has it."""
        skipped = self.diagnostics.get("skipped") or {}
        return {
            q.id: None if q.id in skipped else self.answers[q.id].to_jev(q)
            for q in self.schema.questions
            if q.id in skipped or q.id in self.answers
        }

    def jev_diagnostics(self) -> dict[str, dict[str, Any]]:
        return {
            qid: {"label_mass": a.label_mass, "argmax_is_label": a.argmax_is_label} for qid, a in self.answers.items()
        }


def entropy(probs: Sequence[float]) -> float:
    return -sum(p * math.log(p) for p in probs if p > 0)


def slot_distribution(question: Question, label_ids: Sequence[int], slot: SlotRead) -> SlotDistribution:
    """Renormalise one slot's returned logprobs over the question's labels."""
    if not slot.logprobs:
        raise ValueError(f"question {question.id!r}: the read returned no logprobs at its slot")
    floor = min(slot.logprobs.values()) - MISSING_LABEL_GAP
    logps = []
    missing = []
    for label, tid in zip(question.labels, label_ids):
        lp = slot.logprobs.get(tid)
        if lp is None or math.isnan(lp):
            missing.append(label)
            lp = floor
        logps.append(max(lp, -1e30))  # -inf (a zero probability) stays finite for the softmax
    top = max(logps)
    weights = [math.exp(lp - top) for lp in logps]
    total = sum(weights)
    probs = tuple(w / total for w in weights)
    mass = min(1.0, sum(math.exp(lp) for lp in logps))
    argmax_is_label = None if slot.argmax is None else slot.argmax in set(label_ids)
    return SlotDistribution(probs, mass, argmax_is_label, tuple(missing))


def aggregate(question: Question, draws: Sequence[SlotDistribution]) -> Answer:
    """Combine one question's draws: the mean distribution, and its spread when there are several."""
    if not draws:
        raise ValueError(f"question {question.id!r}: no draws to aggregate")
    n = len(draws)
    k = len(question.alternatives)
    mean = [sum(d.probs[i] for d in draws) / n for i in range(k)]
    order = sorted(range(k), key=lambda i: mean[i], reverse=True)
    top = order[0]
    margin = mean[top] - mean[order[1]] if k > 1 else 1.0  # one answer: nothing to be confused with
    stderr = agreement = None
    if n > 1:
        tops = [d.probs[top] for d in draws]
        mu = sum(tops) / n
        variance = sum((t - mu) ** 2 for t in tops) / (n - 1)
        stderr = math.sqrt(variance / n)
        agreement = sum(1 for d in draws if max(range(k), key=lambda i: d.probs[i]) == top) / n
    return Answer(
        question_id=question.id,
        kind=question.kind,
        answer=question.names[top],
        probabilities={name: p for name, p in zip(question.names, mean)},
        confidence=mean[top],
        entropy=entropy(mean),
        margin=margin,
        label_mass=sum(d.label_mass for d in draws) / n,
        draws=n,
        stderr=stderr,
        agreement=agreement,
        argmax_is_label=draws[0].argmax_is_label,
        draw_entropies=tuple(d.entropy for d in draws),
    )


def decide(
    schema: Schema, reads: Sequence[Mapping[str, SlotRead]], label_ids: Mapping[str, Sequence[int]]
) -> dict[str, Answer]:
    """Answers for every question from one or more reads (noise draws) of the same canvas layout."""
    answers = {}
    for q in schema.questions:
        draws = [slot_distribution(q, label_ids[q.id], read[q.id]) for read in reads]
        answers[q.id] = aggregate(q, draws)
    return answers


def needs_more_draws(schema: Schema, first: Mapping[str, SlotRead], label_ids: Mapping[str, Sequence[int]]) -> int:
    """How many more draws the sampling policy asks for after the first read(s)."""
    policy = schema.sampling
    if policy.samples != "auto" or policy.auto_max <= 1:
        return 0
    worst = max(slot_distribution(q, label_ids[q.id], first[q.id]).entropy for q in schema.questions)
    return policy.auto_max - 1 if worst > policy.auto_threshold else 0
