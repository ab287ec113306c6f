"""The Project tab: the schema as JSON (add, edit, reorder or remove questions there), an optional
response template, a live preview of the prompt and canvas the model will see, and Save, which makes a
new schema version when anything changed."""

from __future__ import annotations

import html
import json

import gradio as gr

from diffjev.canvas import CanvasBuilder
from diffjev.staging import is_staged, model_passes, read_groups
from diffjev.engines.base import EngineError
from diffjev.errors import SchemaError
from diffjev.schema import Schema
from diffjev.spans import ANSWER_HEAD, DEFAULT_SPAN_STEPS, question_max_tokens
from storage import repo
from diffjev.ui.context import Studio, md_text

PREVIEW_STATE = "Everything is down and we have a demo at noon."


def parse(schema_text: str, template_text: str) -> Schema:
    try:
        data = json.loads(schema_text or "")
    except ValueError as exc:
        raise SchemaError(f"the schema is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise SchemaError("the schema must be a JSON object with a 'questions' list")
    data = {k: v for k, v in data.items() if k != "template"}
    if template_text and template_text.strip():
        data["template"] = template_text
    return Schema.from_dict(data)


def canvas_preview(builder: CanvasBuilder, schema: Schema) -> str:
    """The prompt as text, then the canvas token by token: fixed text plain, each slot marked as noise
    with its position and the token every label would put there. Span questions, read on their own, are
    listed after it."""
    own_reads = span_reads_preview(schema)
    labels = schema.slot_part()
    if labels is None:
        return f"<div class='dj-preview'>{own_reads}</div>"
    schema = labels
    canvas = builder.build(schema, PREVIEW_STATE, seed=42)
    tokenizer = builder.tokenizer
    slot_of = {pos: qid for qid, pos in canvas.slots.items()}
    chips = []
    for pos, tid in enumerate(canvas.ids):
        if pos in slot_of:
            qid = slot_of[pos]
            q = schema.question(qid)
            labels = ", ".join(f"{html.escape(label)}→{tid_}" for label, tid_ in zip(q.labels, canvas.label_ids[qid]))
            chips.append(f"<span class='dj-slot' title='labels: {labels}'>▒ {html.escape(qid)} @{pos}</span>")
        else:
            chips.append(f"<span class='dj-tok'>{html.escape(tokenizer.decode([tid]))}</span>")
    slots = "".join(
        f"<li><b>{html.escape(q.id)}</b>: position {canvas.slots[q.id]}, label tokens "
        + ", ".join(
            f"<code>{html.escape(label)}</code> = {tid}" for label, tid in zip(q.labels, canvas.label_ids[q.id])
        )
        + "</li>"
        for q in schema.questions
    )
    prompt = html.escape(tokenizer.decode(list(canvas.prompt_ids)))
    return (
        f"<div class='dj-preview'><p class='dj-passes'>{html.escape(read_cost(schema))}</p>"
        f"<h4>Prompt ({len(canvas.prompt_ids)} tokens)</h4><pre>{prompt}</pre>"
        f"<h4>Canvas ({canvas.width} tokens; slots are noise until the read)</h4>"
        f"<div class='dj-canvas'>{''.join(chips)}</div><ul>{slots}</ul>{own_reads}</div>"
    )


def span_reads_preview(schema: Schema) -> str:
    """What each span question's own read is: the blank the model fills and how the answer is found."""
    lines = [
        f"<li><b>{html.escape(q.id)}</b> ({q.kind}): the item's text with this question, then "
        f"<code>{html.escape(ANSWER_HEAD)}</code> and a blank of {question_max_tokens(q)} tokens, "
        f"denoised in {DEFAULT_SPAN_STEPS} steps over the item's own tokens; the answer is the likeliest "
        "exact piece of the text, or none</li>"
        for q in schema.questions
        if q.type.reads == "span"
    ]
    return f"<h4>Span questions (a read of their own each)</h4><ul>{''.join(lines)}</ul>" if lines else ""


def read_cost(schema: Schema) -> str:
    """What one item's read costs the model: passes per draw (one joint canvas, or one per read group of
    a staged schema), and the draws the sampling policy may take."""
    passes = model_passes(schema.questions)
    stages = read_groups(schema.questions)
    how = (
        " ("
        + "; ".join(
            f"stage {n}: " + ", then ".join(" + ".join(g) for g in groups) for n, groups in enumerate(stages, 1)
        )
        + ")"
        if is_staged(schema.questions)
        else " (every question on one canvas)"
    )
    sampling = schema.sampling
    if sampling.samples == "auto":
        draws = f'; with samples "auto", up to {passes * sampling.auto_max} when a slot is unsure'
    else:
        draws = f"; {sampling.samples} draws make {passes * int(sampling.samples)}" if sampling.samples != 1 else ""
    unit = "pass" if passes == 1 else "passes"
    return f"A read of this schema takes {passes} model {unit}{how}{draws}."


def build(studio: Studio) -> None:
    gr.Markdown(
        "Edit the questions as JSON: each has an `id`, a `type` (yes_no, choice, score; `noul`, the Jev API's "
        "name for a yes/no question, is read as yes_no), `instructions`, "
        "and `options` or `levels` (names, or `{name, description}`). Order here is the order on the "
        "canvas. The template is optional: one `{question_id}` slot per question. `hidden_fields` (optional) "
        "lists item fields annotators do not see on the card, such as a gold answer; exports keep them."
    )
    with gr.Row():
        with gr.Column():
            schema_box = gr.Code(language="json", label="Schema", elem_id="schema-json")
            template_box = gr.Textbox(
                lines=3,
                label="Response template (optional)",
                placeholder="Urgent: {urgent}\nTeam: {team}\nTone: {tone}/3",
                elem_id="schema-template",
            )
            error = gr.Markdown(elem_id="schema-error")
            save = gr.Button("Save schema", variant="primary", elem_id="schema-save")
        with gr.Column():
            preview = gr.HTML(elem_id="canvas-preview")

    def show(schema_text: str, template_text: str) -> tuple[str, str]:
        try:
            parsed = parse(schema_text, template_text)
            return "", canvas_preview(studio.preview_builder(), parsed)
        except (SchemaError, EngineError) as exc:  # EngineError: no model to lay the canvas out with yet
            return f"⚠️ {md_text(str(exc))}", ""

    def store(schema_text: str, template_text: str, request: gr.Request) -> tuple[str, str]:
        scope = studio.scope(request)
        scope.require_reviewer("Changing the schema")
        try:
            parsed = parse(schema_text, template_text)
            studio.preview_builder().check(parsed)  # refuse a template the model cannot read
        except (SchemaError, EngineError) as exc:
            return f"⚠️ {md_text(str(exc))}", gr.update()
        with studio.db.session() as session:
            project = repo.get_project(session, scope.project)
            version = repo.save_schema(session, project, parsed, scope.user).version
        return f"Saved as schema version {version}. Reload the page to annotate with it.", canvas_preview(
            studio.preview_builder(), parsed
        )

    schema_box.change(show, [schema_box, template_box], [error, preview], api_name="preview_schema")
    template_box.change(show, [schema_box, template_box], [error, preview], api_visibility="private")
    save.click(store, [schema_box, template_box], [error, preview], api_name="save_schema")

    def current(request: gr.Request) -> tuple:
        """The schema as saved; on an annotator's page, to read only (its Save would be refused anyway)."""
        scope = studio.scope(request)
        data = studio.schema(scope)[1].to_dict()
        template = data.pop("template", "")
        editable = scope.may_review()
        return (
            gr.Code(json.dumps(data, indent=2), interactive=editable),
            gr.Textbox(template, interactive=editable),
            *show(json.dumps(data), template),
            gr.Button(visible=editable),
        )

    studio.on_load.append((current, [], [schema_box, template_box, error, preview, save]))
