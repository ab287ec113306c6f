"""The "Try a read" tab: write a schema, paste an item, and see every question's distribution from one
structured read, with nothing stored."""

from __future__ import annotations

import html
import json
from typing import Any

import gradio as gr

from diffjev.decide import Decision
from diffjev.spans import SpanAnswer
from diffjev.demo import TICKETS_SCHEMA
from diffjev.engines.slot import EngineSlot
from diffjev.engines.base import EngineError
from diffjev.read import read
from diffjev.ui.context import md_text
from diffjev.schema import Schema, SchemaError

DEMO_SCHEMA = {**TICKETS_SCHEMA, "samples": "auto"}
DEMO_STATE = "Everything is down and we have a demo at noon."
# One answer has two probabilities, named apart on the page: the Jev JSON calls the second `confidence`.
CONFIDENCE_NOTE = (
    "**confidence**: the answer's probability normalised over the question's answers. "
    "**full-vocabulary probability**: the same answer's probability over the model's whole vocabulary "
    "(confidence × label mass), which the Jev JSON calls `confidence`, as the Jev wire format does."
)


def distribution_html(decision: Decision) -> str:
    """Each question's distribution as bars (a span question: its words and offsets; a staged question the
    read did not ask: why); every name is escaped, so an item cannot inject markup."""
    rows = []
    skipped = decision.diagnostics.get("skipped") or {}
    for q in decision.schema.questions:
        qid, answer = q.id, decision.answers.get(q.id)
        if answer is None:
            why = skipped.get(qid) or {}
            rows.append(
                f"<div class='dj-q'><b>{html.escape(qid)}</b>: not asked ({html.escape(str(why.get('because')))} "
                f"was {html.escape(str(why.get('was')))}; asked when it is "
                f"{html.escape(' or '.join(map(str, why.get('wanted') or [])))})</div>"
            )
            continue
        if isinstance(answer, SpanAnswer):
            words = " · ".join(f"“{s.text}” ({s.start}-{s.end}, {s.confidence:.3f})" for s in answer.spans)
            rows.append(
                f"<div class='dj-q'><b>{html.escape(qid)}</b>: {html.escape(words or 'none')} "
                f"(confidence {answer.confidence:.3f} over {answer.reads} read(s))</div>"
            )
            continue
        bars = "".join(
            f"<div class='dj-row'><span class='dj-name'>{html.escape(name)}</span>"
            f"<span class='dj-bar' style='width:{100 * p:.1f}%'></span><span>{p:.3f}</span></div>"
            for name, p in sorted(answer.probabilities.items(), key=lambda kv: -kv[1])
        )
        spread = f", ± {answer.stderr:.3f} over {answer.draws} draws" if answer.stderr is not None else ""
        rows.append(
            f"<div class='dj-q'><b>{html.escape(qid)}</b>: {html.escape(answer.answer)} "
            f"(confidence {answer.confidence:.3f}{spread}; full-vocabulary probability "
            f"{answer.full_vocab_confidence:.3g} = confidence × label mass {answer.label_mass:.3g})"
            f"{bars}</div>"
        )
    return "".join(rows)


CSS = """
.dj-row { display: flex; gap: .5em; align-items: center; }
.dj-name { width: 10em; }
.dj-bar { display: inline-block; height: .8em; background: #3b82f6; }
.dj-q { margin-bottom: 1em; }
"""


def build(slot: EngineSlot) -> None:
    """The "Try a read" tab: one read of one item, nothing stored."""

    def run(schema_text: str, state_text: str) -> tuple[str, Any, str]:
        try:
            schema = Schema.from_dict(json.loads(schema_text))
        except ValueError as exc:  # malformed JSON or SchemaError
            return "", None, f"**Schema:** {md_text(str(exc))}"
        state: Any = state_text
        if state_text.strip().startswith(("{", "[")):
            try:
                state = json.loads(state_text)
            except ValueError:
                pass  # text that happens to start with a brace is read as text
        try:
            decision = read(schema, state, slot.engine)  # EngineError while the model is still loading
        except (SchemaError, EngineError) as exc:
            return "", None, f"**Read failed:** {md_text(str(exc))}"
        timing = decision.diagnostics.get("timing", {})
        seconds = sum(v for k, v in timing.items() if k.endswith("_s"))
        return (
            distribution_html(decision),
            decision.to_jev(),
            f"{decision.diagnostics.get('draws', 1)} draw(s), {seconds * 1000:.0f} ms",
        )

    with gr.Row():
        with gr.Column():
            schema_box = gr.Code(
                json.dumps(DEMO_SCHEMA, indent=2), language="json", label="Schema", elem_id="try-schema"
            )
            state_box = gr.Textbox(DEMO_STATE, lines=4, label="Item (text or JSON)", elem_id="try-state")
            go = gr.Button("Read", variant="primary", elem_id="try-read")
        with gr.Column():
            status = gr.Markdown(elem_id="try-status")
            bars = gr.HTML(elem_id="try-distributions")
            gr.Markdown(CONFIDENCE_NOTE, elem_id="try-confidence-note")
            jev = gr.JSON(label="Jev answer shapes (their confidence: the full-vocabulary probability)")
    go.click(run, [schema_box, state_box], [bars, jev, status], api_name="read")
