"""A client of a decision server: the Jev decision API, `POST /v1/systemone` (vLLM's own, djev's, or
diffjev's), or vLLM 0.33's strict `POST /v1/decisions`. The server reads with its own prompt (question by
question, or, where it reads jointly, its own joint canvas), so a custom response template cannot apply;
its answers become the same Decision as every other engine's."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable, Iterator


from diffjev.canvas import render_state
from diffjev.images import ImageState
from diffjev.decide import Decision, SlotDistribution, aggregate
from diffjev.engines._http import HTTPClients, ServerAnswered, post_json
from diffjev.engines.base import DEFAULT_SEED, CannotRead, Engine, EngineError, server_url, shown_url
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


API_CHOICES = ("systemone", "decisions")
# diffjev's kinds as the Decisions API types them.
DECISIONS_TYPES = {"yes_no": "predicate", "choice": "choice", "score": "score"}


class WrongAnswer(ValueError):
    """A Decisions API answer that is not the shape asked for; the message is ours, never the server's."""


def decisions_question(q: Question) -> dict[str, Any]:
    """One question in `POST /v1/decisions`'s strict form, named by its id so the answer can be matched."""
    out: dict[str, Any] = {"type": DECISIONS_TYPES[q.kind], "name": q.id, "instructions": q.instructions}
    if q.kind == "choice":
        out["choices"] = [_described({"value": a.name}, a.description) for a in q.alternatives]
    elif q.kind == "score":
        out["levels"] = [_described({"label": a.name}, a.description) for a in q.alternatives]
    return out


def _described(entry: dict[str, Any], description: str | None) -> dict[str, Any]:
    return {**entry, "description": description} if description else entry


def check_decisions_question(q: Question) -> None:
    """SchemaError, naming the field and the fix, for what `POST /v1/decisions` cannot ask."""
    if q.kind not in DECISIONS_TYPES:
        raise SchemaError(
            f"the Decisions API has no {q.kind} questions (only yes/no, choice and score); read them with "
            "api='systemone' or a canvas engine",
            question=q.id,
            field="type",
        )
    staged = next((f for f, v in (("depends_on", q.depends_on), ("ask_if", q.ask_if), ("alone", q.alone)) if v), None)
    if staged:
        raise SchemaError(
            "the Decisions API reads every question unconditionally: it has no depends_on, ask_if or alone; "
            "remove them, or read with api='systemone'",
            question=q.id,
            field=staged,
        )
    if q.kind == "yes_no" and any(a.description for a in q.alternatives):
        raise SchemaError(
            "the Decisions API's yes/no (predicate) question takes no descriptions of yes and no; move them "
            "into the instructions, or read with api='systemone'",
            question=q.id,
            field="criteria",
        )


def _probability(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0 + 1e-6:
        raise WrongAnswer("a probability is not a number in 0..1")
    return min(float(value), 1.0)


def decisions_distribution(q: Question, shape: Any) -> SlotDistribution:
    """One Decisions API answer as a distribution in answer order. A predicate's `probability` is P(true):
    its label mass is not given, and stands at 1.0. A choice's or score's `confidence` is upstream's top
    probability times the label mass, so the label mass is confidence / top probability."""
    if not isinstance(shape, dict) or shape.get("type") != DECISIONS_TYPES[q.kind]:
        raise WrongAnswer(f"its type is not {DECISIONS_TYPES[q.kind]}")
    if shape.get("name") != q.id:
        raise WrongAnswer("it is not named by the question's id")
    if q.kind == "yes_no":
        p_yes = _probability(shape.get("probability"))
        return SlotDistribution((p_yes, 1.0 - p_yes), 1.0, None)
    entries = shape.get("probabilities")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise WrongAnswer("its probabilities are not a list of {value, probability}")
    by_value = {e.get("value"): _probability(e.get("probability")) for e in entries}
    wanted = list(q.names) if q.kind == "choice" else list(range(len(q.alternatives)))  # a level by its index
    if set(by_value) != set(wanted) or len(entries) != len(wanted):
        raise WrongAnswer(f"its probabilities do not give each {q.type.answer_word} once")
    probs = [by_value[v] for v in wanted]
    total = sum(probs)
    if total <= 0:
        raise WrongAnswer("its probabilities sum to zero")
    probs = [p / total for p in probs]
    label_mass = min(1.0, _probability(shape.get("confidence")) / max(probs))
    return SlotDistribution(tuple(probs), label_mass, None)


class JevAPIEngine(Engine):
    """Reads through a decision server. `api` picks the endpoint:

    - `"systemone"`: `POST /v1/systemone`, the Jev decision API (vLLM 0.32+, djev, diffjev), questions keyed
      by id, with per-question label mass in its diagnostics;
    - `"decisions"`: `POST /v1/decisions`, vLLM 0.33's strict OpenAI-style API, questions as a list. It
      gives no label mass for a yes/no (predicate) answer, no argmax_is_label, and no canvas count; a
      Decision records which of these it lacks under `diagnostics["not_given"]`.

    With `joint` (the default) the engine asks the server to read the questions jointly (vLLM 0.33's
    `joint: true`, one canvas for many questions). Whether the server does is found out on the first read
    and remembered: a server whose model has no joint reads answers 400 (the read is made again without
    it), and one that predates the field ignores it (its answer has no `joint` key). Each Decision says in
    its diagnostics which way it was read (`joint`), the server's joint diagnostics where it gave them, and
    why it was not joint (`joint_note`).
    """

    name = "jev-api"

    def __init__(
        self,
        url: str,
        model: str | None = None,
        *,
        api: str = "systemone",
        joint: bool = True,
        max_in_flight: int = 16,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        api_key: str | None = None,
    ):
        if api not in API_CHOICES:
            raise EngineError(f"unknown decision API {api!r}; choose one of {', '.join(API_CHOICES)}")
        if api == "decisions" and not model:
            raise EngineError(
                "the decisions API (POST /v1/decisions) needs the served model name: pass model= "
                "(or set DIFFJEV_VLLM_MODEL)"
            )
        self.url = server_url(url)  # no query or fragment: it would change the path the read goes to
        self.api = api
        self.endpoint = f"{self.url}/v1/{api}"
        self.server_kind = "Jev API" if api == "systemone" else "Decisions API"
        self.model_name = model or ""
        self._clients = HTTPClients(timeout, connect_timeout, api_key)
        self._pool = ThreadPoolExecutor(max_in_flight, thread_name_prefix="jev-read")
        self.max_in_flight = max_in_flight
        # Whether the server takes `joint: true`: None until the first read has found out.
        self.joint_supported: bool | None = None if joint else False
        self.joint_note = "" if joint else "joint reads were not asked for"
        self._first_read = threading.Lock()

    # --- requests -------------------------------------------------------------------------------------------
    def request_body(self, schema: Schema, state: Any) -> dict[str, Any]:
        """The request for one item, without `joint` (the engine adds it where the server takes it)."""
        if self.api == "decisions":
            return self.decisions_body(schema, state)
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

    def decisions_body(self, schema: Schema, state: Any) -> dict[str, Any]:
        """`POST /v1/decisions`'s strict request. The API has no place for a schema's instructions, so they
        go as a first user message ahead of the item (the server joins the messages with a blank line)."""
        if isinstance(state, ImageState):
            raise CannotRead(
                f"the Decisions API at {shown_url(self.endpoint)} reads text only; read images with "
                "api='systemone' (vLLM 0.33 shows them to DiffusionGemma) or a canvas engine"
            )
        text = render_state(state)
        given: Any = text
        if schema.instructions:
            given = [{"role": "user", "content": schema.instructions}, {"role": "user", "content": text}]
        return {
            "model": self.model_name,
            "input": given,
            "questions": [decisions_question(q) for q in schema.questions],
        }

    def check_schema(self, schema: Schema) -> None:
        if schema.template is not None and not schema.template.is_default_for(schema.slot_ids):
            raise SchemaError(
                "the Jev API reads with its own prompt and cannot use a custom template; remove the template "
                "or use a canvas engine (vllm, transformers)",
                field="template",
            )
        check_upstream_limits(schema)
        if self.api == "decisions":
            for q in schema.questions:
                check_decisions_question(q)

    # --- reading --------------------------------------------------------------------------------------------
    @property
    def look_ahead(self) -> int:
        return 2 * self.max_in_flight

    def decide_many(self, schema: Schema, states: Iterable[Any], seed: int = DEFAULT_SEED) -> Iterator[Decision]:
        self.check_schema(schema)
        # Bounded look-ahead keeps a long stream from queueing every request at once.
        pending = []
        for state in states:
            pending.append(self._pool.submit(self._decide_one, schema, state))
            if len(pending) >= self.look_ahead:
                yield pending.pop(0).result()
        for future in pending:
            yield future.result()

    def _send(self, body: dict[str, Any]) -> Any:
        try:
            return post_json(self._clients.get(), self.endpoint, body, self.server_kind)
        except ServerAnswered as exc:
            if self.api == "decisions" and exc.status in (404, 405, 501):
                raise ServerAnswered(
                    f"{exc}. POST /v1/decisions needs vLLM 0.33 or later serving a model with decision reads; "
                    "for an older server use the Jev API (api='systemone')",
                    exc.status,
                ) from None
            raise

    def _post(self, body: dict[str, Any]) -> tuple[Any, bool]:
        """The server's answer, and whether `joint: true` was sent with the request."""
        if self.joint_supported is None:
            with self._first_read:  # the other reads wait until the first has found out
                if self.joint_supported is None:
                    return self._find_out_joint(body), bool(self.joint_supported)
        if self.joint_supported:
            return self._send({**body, "joint": True}), True
        return self._send(body), False

    def _find_out_joint(self, body: dict[str, Any]) -> Any:
        """The first read, asked with `joint: true`; its answer says whether the server reads jointly."""
        shown = shown_url(self.endpoint)
        try:
            data = self._send({**body, "joint": True})
        except ServerAnswered as exc:
            if exc.status != 400:
                raise
            data = self._send(body)  # a failure now is the read's own, not the joint field's
            self.joint_supported = False
            self.joint_note = (
                f"the server at {shown} answered 400 to joint: true (vLLM 0.33 does for a model without joint "
                "reads), so each question is read on its own"
            )
            return data
        if self.api == "systemone" and isinstance(data, dict) and "joint" not in data:
            self.joint_supported = False
            self.joint_note = (
                f"the server at {shown} ignored joint: true (its answer has no joint key, as vLLM 0.32 and "
                "earlier), so each question is read on its own"
            )
        else:
            self.joint_supported = True
        return data

    def _decide_one(self, schema: Schema, state: Any) -> Decision:
        started = time.perf_counter()
        data, joint_sent = self._post(self.request_body(schema, state))
        if self.api == "decisions":
            answers, not_given = self._decisions_answers(schema, data)
            skipped: dict[str, Any] = {}
            joint_diagnostics = None
            joint = joint_sent and len(schema.questions) > 1  # the API reads one question on its own prompt
            passes = None if joint else len(schema.questions)  # the API does not say how many canvases
            if joint:
                not_given.setdefault("model_passes", True)
        else:
            answers, skipped = self._systemone_answers(schema, data, state)
            not_given = {}
            joint_diagnostics = self._joint_diagnostics(data)
            joint = joint_diagnostics is not None
            passes = len(joint_diagnostics["canvases"]) if joint else len(schema.questions)
        note = self.joint_note
        if joint_sent and not joint:
            note = (
                "the server took joint: true but read this item question by question (vLLM 0.33 reads a "
                "single question on its own prompt)"
            )
        diagnostics = {
            "engine": self.name,
            "api": self.api,
            "model": data.get("model") or self.model_name,
            "endpoint": shown_url(self.endpoint),
            "prompt_ids": None,
            "canvas_ids": None,
            "slots": None,
            "label_ids": None,
            "draws": 1,
            "joint": joint,
            "joint_diagnostics": joint_diagnostics,
            "joint_note": "" if joint else note,
            "model_passes": passes,
            "sampling": ("one read per joint canvas" if joint else "one read per question")
            + " (the decision API takes no sampling policy)",
            "usage": data.get("usage"),
            **({"not_given": not_given} if not_given else {}),
            **({"skipped": skipped} if skipped else {}),
            "timing": {"read_s": time.perf_counter() - started},
        }
        return Decision(answers, schema, diagnostics)

    def _joint_diagnostics(self, data: Any) -> dict[str, Any] | None:
        """The server's `joint` diagnostics (`{canvases: [{questions, width, slots}]}`), None where it read
        question by question; EngineError where they are not that shape."""
        given = data.get("joint") if isinstance(data, dict) else None
        if given is None:
            return None
        canvases = given.get("canvases") if isinstance(given, dict) else None
        if not (
            isinstance(canvases, list)
            and canvases
            and all(isinstance(c, dict) and isinstance(c.get("questions"), list) for c in canvases)
        ):
            raise EngineError(
                f"the answer from the {self.server_kind} at {shown_url(self.endpoint)} has joint diagnostics that "
                "are not a list of canvases, each naming its questions"
            )
        return given

    def _systemone_answers(
        self, schema: Schema, data: Any, state: Any
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        answers: dict[str, Any] = {}
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
                    f"the answer from the Jev API at {shown_url(self.endpoint)} is not a structured decision: "
                    f"no usable answers.{q.id}.probabilities over the question's answers"
                ) from None
            answers[q.id] = aggregate(q, [dist])
        return answers, skipped

    def _decisions_answers(self, schema: Schema, data: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """The Decisions API's answer list (in question order, each named by its question id) as Answers,
        and what it did not give: {"label_mass": [ids], "argmax_is_label": True}."""
        given = data.get("answers") if isinstance(data, dict) else None
        shown = shown_url(self.endpoint)
        if not isinstance(given, list) or len(given) != len(schema.questions):
            raise EngineError(
                f"the answer from the Decisions API at {shown} is not a decision: answers must be a list of "
                f"{len(schema.questions)}, one per question in order"
            )
        answers = {}
        no_mass = []
        for i, (q, shape) in enumerate(zip(schema.questions, given)):
            try:
                dist = decisions_distribution(q, shape)
            except (ValueError, KeyError, TypeError, AttributeError) as exc:  # never quote the answer
                why = str(exc) if isinstance(exc, WrongAnswer) else "missing or malformed fields"
                raise EngineError(
                    f"the answer from the Decisions API at {shown} is not a decision: answers[{i}] is not a "
                    f"usable {DECISIONS_TYPES[q.kind]} answer to {q.id}: {why}"
                ) from None
            if q.kind == "yes_no":
                no_mass.append(q.id)
            answers[q.id] = aggregate(q, [dist])
        not_given: dict[str, Any] = {"argmax_is_label": True}
        if no_mass:
            not_given["label_mass"] = no_mass
        return answers, not_given

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
