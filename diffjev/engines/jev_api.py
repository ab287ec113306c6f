"""A client of any server speaking the Jev decision API, `POST /v1/systemone`: vLLM's own, djev's, or
diffjev's. The server reads question by question with its own prompt, so a custom response template
cannot apply; its answers become the same Decision as every other engine's."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Iterator


from diffjev.canvas import render_state
from diffjev.images import ImageState
from diffjev.decide import Decision, SlotDistribution, aggregate
from diffjev.engines._http import HTTPClients, post_json
from diffjev.engines.base import DEFAULT_SEED, Engine, EngineError, server_url, shown_url
from diffjev.jev import check_upstream_limits
from diffjev.schema import Question, Schema, SchemaError
from diffjev.spans import SpanAnswer, span_answer_from_jev
from diffjev.staging import skips


def _distribution(question: Question, shape: dict[str, Any], diagnostics: dict[str, Any]) -> SlotDistribution:
    """One question's answer shape back to a distribution in answer order."""
    probs = question.type.jev_probabilities(question, shape)
    total = sum(probs)
    if total <= 0:
        raise ValueError("probabilities sum to zero")
    return SlotDistribution(
        tuple(p / total for p in probs), float(diagnostics.get("label_mass", 1.0)), diagnostics.get("argmax_is_label")
    )


def _skipped(schema: Schema, data: Any) -> dict[str, dict[str, Any]]:
    """The staged questions the server answered `null`, each with its skip record: the server's own
    (`diagnostics.skipped`), or, from a server that gives none, the one the answers it did give imply."""
    answers = data.get("answers") if isinstance(data, dict) else None
    if not isinstance(answers, dict):
        return {}
    told = (data.get("diagnostics") or {}).get("skipped") if isinstance(data.get("diagnostics"), dict) else None
    implied = skips(schema.questions, {qid: _answer_name(a) for qid, a in answers.items()})
    out = {}
    for q in schema.questions:
        if q.id in answers and answers[q.id] is None and (q.ask_if or q.depends_on):
            record = told.get(q.id) if isinstance(told, dict) else None
            out[q.id] = (
                record if isinstance(record, dict) else implied.get(q.id, {"because": None, "was": None, "wanted": []})
            )
    return out


def _answer_name(shape: Any) -> str | None:
    """The answer name a Jev answer shape stands for (yes/no by P(yes), the option, the top level)."""
    if not isinstance(shape, dict):
        return None
    if shape.get("type") == "noul" and isinstance(shape.get("noul"), (int, float)):
        return "yes" if shape["noul"] >= 0.5 else "no"
    if shape.get("type") == "choice":
        return shape.get("choice")
    probabilities, legend = shape.get("probabilities"), shape.get("legend")
    if shape.get("type") == "score" and isinstance(probabilities, dict) and isinstance(legend, dict) and probabilities:
        return legend.get(max(probabilities, key=probabilities.get))
    return None


class JevAPIEngine(Engine):
    name = "jev-api"

    def __init__(
        self,
        url: str,
        model: str | None = None,
        *,
        max_in_flight: int = 16,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        api_key: str | None = None,
    ):
        self.url = server_url(url)  # no query or fragment: it would change the path the read goes to
        self.endpoint = f"{self.url}/v1/systemone"
        self.model_name = model or ""
        self._clients = HTTPClients(timeout, connect_timeout, api_key)
        self._pool = ThreadPoolExecutor(max_in_flight, thread_name_prefix="jev-read")
        self.max_in_flight = max_in_flight

    def request_body(self, schema: Schema, state: Any) -> dict[str, Any]:
        image = state.image if isinstance(state, ImageState) else None
        state = state.text if image is not None else state
        body: dict[str, Any] = {
            "state": state if isinstance(state, (dict, list)) else render_state(state),
            "questions": schema.to_jev_questions(),
        }
        if image is not None:  # the Jev API's images: data URLs, shown ahead of the state
            body["images"] = [image.data_url()]
        if self.model_name:
            body["model"] = self.model_name
        if schema.instructions:
            body["instructions"] = schema.instructions
        return body

    def check_schema(self, schema: Schema) -> None:
        if schema.template is not None and not schema.template.is_default_for(schema.slot_ids):
            raise SchemaError(
                "the Jev API reads question by question with its own prompt and cannot use a custom "
                "template; remove the template or use a canvas engine (vllm, transformers)",
                field="template",
            )
        check_upstream_limits(schema)

    def decide_many(self, schema: Schema, states: Iterable[Any], seed: int = DEFAULT_SEED) -> Iterator[Decision]:
        self.check_schema(schema)
        # Bounded look-ahead keeps a long stream from queueing every request at once.
        pending = []
        for state in states:
            pending.append(self._pool.submit(self._decide_one, schema, state))
            if len(pending) >= 2 * self.max_in_flight:
                yield pending.pop(0).result()
        for future in pending:
            yield future.result()

    def _decide_one(self, schema: Schema, state: Any) -> Decision:
        where = self.endpoint
        started = time.perf_counter()
        data = post_json(self._clients.get(), where, self.request_body(schema, state), "Jev API")
        answers = {}
        skipped = _skipped(schema, data)
        for q in schema.questions:
            if q.id in skipped:  # a staged question the server did not read: no answer, only why
                continue
            if q.type.reads == "span":
                answers[q.id] = self._span_answer(q, data, state)
                continue
            try:
                dist = _distribution(q, data["answers"][q.id], (data.get("diagnostics") or {}).get(q.id) or {})
            except (ValueError, KeyError, TypeError, AttributeError):  # never quote the answer: it may be anyone's
                raise EngineError(
                    f"the answer from the Jev API at {shown_url(where)} is not a structured decision: "
                    f"no usable answers.{q.id}.probabilities over the question's answers"
                ) from None
            answers[q.id] = aggregate(q, [dist])
        diagnostics = {
            "engine": self.name,
            "model": data.get("model") or self.model_name,
            "endpoint": shown_url(where),
            "prompt_ids": None,
            "canvas_ids": None,
            "slots": None,
            "label_ids": None,
            "draws": 1,
            "model_passes": len(schema.questions),  # the server reads one canvas per question
            "sampling": "one read per question (the Jev API takes no sampling policy)",
            "usage": data.get("usage"),
            **({"skipped": skipped} if skipped else {}),
            "timing": {"read_s": time.perf_counter() - started},
        }
        return Decision(answers, schema, diagnostics)

    def _span_answer(self, q: Question, data: Any, state: Any) -> SpanAnswer:
        try:
            return span_answer_from_jev(q, data["answers"][q.id], render_state(state))
        except (ValueError, KeyError, TypeError, AttributeError):  # never quote the answer: it may be anyone's
            raise EngineError(
                f"the answer from the Jev API at {shown_url(self.endpoint)} is not a usable {q.kind} answer for "
                f"{q.id}: its offsets must slice its text out of the item text"
            ) from None

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._clients.close()
