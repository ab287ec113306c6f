"""The Review tab: per-question acceptance and model accuracy, disagreements, low-confidence accepts,
and changing an item's answer (recorded as an event)."""

from __future__ import annotations

import html
from typing import Any

import gradio as gr
import pandas as pd

from diffjev.services import review
from diffjev.ui.context import Studio


def build(studio: Studio) -> None:
    refresh = gr.Button("Refresh", elem_id="review-refresh")
    summary = gr.Dataframe(label="Per question", interactive=False, elem_id="review-summary")
    disagree = gr.Dataframe(label="Model and human disagree", interactive=False, elem_id="review-disagreements")
    unsure = gr.Dataframe(label=f"Accepted while the model was unsure (confidence < {review.LOW_CONFIDENCE})",
                          interactive=False, elem_id="review-unsure")
    gr.Markdown("**Change an answer**")
    with gr.Row():
        item = gr.Number(label="Item", precision=0, elem_id="review-item")
        _, schema, _, _ = studio.schema()
        question = gr.Dropdown([q.id for q in schema.questions], label="Question", elem_id="review-question")
        value = gr.Textbox(label="New answer", elem_id="review-value")
        change = gr.Button("Change", elem_id="review-change")
    note = gr.Markdown(elem_id="review-note")

    def tables() -> tuple[Any, Any, Any]:
        return (pd.DataFrame(review.question_report(studio.db, studio.project)),
                pd.DataFrame(review.disagreements(studio.db, studio.project)),
                pd.DataFrame(review.low_confidence_accepts(studio.db, studio.project)))

    def reopen(item_id: float | None, key: str, answer: str, request: gr.Request) -> str:
        if item_id is None or not key:
            return "⚠️ Give the item number and the question."
        try:
            review.reopen(studio.db, studio.project, int(item_id), key, answer.strip(), studio.annotator(request))
        except ValueError as exc:
            return f"⚠️ {html.escape(str(exc))}"
        return f"Item {int(item_id)}, {html.escape(key)}: changed to {html.escape(answer.strip())}."

    def questions() -> Any:
        return gr.update(choices=[q.id for q in studio.schema()[1].questions])

    studio.on_load.append((questions, [], [question]))
    refresh.click(tables, [], [summary, disagree, unsure], api_name="review")
    change.click(reopen, [item, question, value], [note], api_name="review_change")
    studio.on_load.append((tables, [], [summary, disagree, unsure]))
