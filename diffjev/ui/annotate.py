"""The Annotate tab: one item and one question at a time, the model's distribution beside it, and a key
for every action (Enter or A accepts, 1-9 picks an answer, S skips, U undoes)."""

from __future__ import annotations

import html
import time
from typing import Any

import gradio as gr
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml

from diffjev.services import annotation
from diffjev.services.prelabel import background_line
from diffjev.storage import repo
from diffjev.ui.context import Studio, md_text, refusal
from diffjev.ui.data import LATEST, LATEST_LABEL, keep_pick, pick_of, run_choices

MAX_KEYS = 9
HELP = "**Keys:** Enter or A accept the model's answer · 1–9 pick an answer · S skip · U undo"
QUEUES = {
    "Unlabeled, in order": "in_order",
    "Least confidence first": "least_confidence",
    "Smallest margin first": "margin",
    "Highest entropy first": "entropy",
    "Most unstable across reads (stderr)": "stderr",
    "Uncertain, spread over topics": "diverse",
    "Runs disagree": "run_disagreement",
    "Second opinion (model and first annotator disagree)": "second_opinion",
    "Double annotation (agreement share)": "overlap",
    "Changed since answered (after a new run)": "changed",
    "Blind slice (suggestion hidden)": "blind",
}

# Keyboard shortcuts: Gradio has none built in, so a small script clicks the tab's buttons by id. Keys
# are ignored while typing in a field, and act only while the Annotate tab is on screen.
KEYS_JS = """
<script>
document.addEventListener("keydown", (e) => {
  const t = e.target;
  if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable)) return;
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  let id = null;
  if (e.key === "Enter" || e.key === "a") id = "accept";
  else if (/^[1-9]$/.test(e.key)) id = "pick-" + e.key;
  else if (e.key === "s") id = "skip";
  else if (e.key === "u" || e.key === "Backspace") id = "undo";
  if (!id) return;
  const el = document.getElementById(id);
  const button = el && (el.tagName === "BUTTON" ? el : el.querySelector("button"));
  if (button && button.offsetParent !== null && !button.disabled) { e.preventDefault(); button.click(); }
});
</script>
"""


def _image_as_text(self, tokens, idx, options, env) -> str:
    return escapeHtml(f"[image: {tokens[idx].content}]")


# Instructions are written by whoever edits the schema and shown in every annotator's browser. Markdown
# keeps its emphasis, lists and links, but raw HTML is escaped and an image becomes its alt text: an
# image, `![x](http://...)` or `<img src=...>`, would make each annotator's browser fetch a remote address.
_INSTRUCTIONS = MarkdownIt("commonmark", {"html": False})
_INSTRUCTIONS.add_render_rule("image", _image_as_text)


def instructions_html(text: str) -> str:
    """A question's instructions as HTML that loads nothing: no image, no raw markup, no script."""
    return f"<div class='dj-question' style='font-weight: 600'>{_INSTRUCTIONS.render(text)}</div>"


def item_html(card: annotation.Card) -> str:
    """The item as text: every character escaped, so markup in an item is shown, never run."""
    fields = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in card.fields.items()
    )
    ident = html.escape(card.external_id or str(card.item_id))
    return (
        f"<div class='dj-item'><div class='dj-id'>item {ident}</div>"
        f"<div class='dj-text'>{html.escape(card.text)}</div>"
        + (f"<table class='dj-fields'>{fields}</table>" if fields else "")
        + "</div>"
    )


def build(studio: Studio) -> None:
    with gr.Row():
        # Filled when the page loads, so the page and API description served before a login hold none of the
        # project's question ids; any value is checked against the project's schema by the service.
        question = gr.Dropdown([], label="Question", allow_custom_value=True, elem_id="annotate-question")
        queue = gr.Dropdown(list(QUEUES), value="Least confidence first", label="Queue", elem_id="annotate-queue")
        run_pick = gr.Dropdown([(LATEST_LABEL, LATEST)], value=LATEST, label="Suggestions from", elem_id="annotate-run")
        start = gr.Button("Start", elem_id="annotate-start")
    gr.Markdown(HELP, elem_id="keys-help")
    # A pre-label run going in the background (this tab's, another tab's, the demo's): its count, refreshed.
    prelabeling = gr.Markdown(elem_id="annotate-prelabel")
    ticker = gr.Timer(2.0)
    progress = gr.Markdown(elem_id="annotate-progress")
    with gr.Row():
        with gr.Column(scale=3):
            item = gr.HTML(elem_id="item")
        with gr.Column(scale=2):
            prompt = gr.HTML(elem_id="question-text")  # instructions_html: Markdown would load images
            distribution = gr.Label(label="Model's distribution", elem_id="distribution")
            info = gr.Markdown(elem_id="suggestion-info")
    with gr.Row():
        accept = gr.Button("Accept (Enter)", variant="primary", elem_id="accept")
        picks = [gr.Button(f"{k}", visible=False, elem_id=f"pick-{k}") for k in range(1, MAX_KEYS + 1)]
        skip = gr.Button("Skip (S)", elem_id="skip")
        undo = gr.Button("Undo (U)", elem_id="undo")
    with gr.Row():  # every answer, for questions with more than nine
        any_answer = gr.Dropdown([], label="Any answer", elem_id="pick-any")
        give = gr.Button("Answer", elem_id="pick-any-go")
    state = gr.State(None)
    outputs = [state, progress, item, prompt, distribution, info, accept, *picks, any_answer]

    def show(card: annotation.Card | None, strategy: str, note: str = "", run: int | None = None) -> tuple:
        if card is None:
            empty = "**Nothing left in this queue.** " + note
            return (
                None,
                empty,
                "",
                "",
                None,
                "",
                gr.update(interactive=False),
                *[gr.update(visible=False) for _ in picks],
                gr.update(choices=[], value=None),
            )
        done, total = annotation.progress(studio.db, card.project_id, card.question_row)
        line = f"{done} of {total} items answered for **{card.question.id}**, {total - done} to go. {note}"
        s = card.suggestion
        if s is None:
            label, text = None, ("Suggestion hidden: blind slice." if card.blind else "No suggestion for this item.")
        else:
            label = s["distribution"]
            text = f"Model: **{md_text(s['answer'])}**, confidence {s['confidence']:.2f}"
            if s.get("stderr") is not None:
                text += f" ± {s['stderr']:.2f} over {s['draws']} reads"
            if s.get("calibrated") is not None:
                text += f"; calibrated confidence {s['calibrated']:.2f}"
        if card.current is not None:
            text += f"  \nYour current answer: **{md_text(card.current)}**"
        pick_updates = [
            gr.update(
                visible=i < len(card.question.names),
                value=f"{i + 1} {card.question.names[i]}" if i < len(card.question.names) else "",
            )
            for i in range(MAX_KEYS)
        ]
        session = {"card": card, "shown_at": time.monotonic(), "strategy": strategy, "run": run}
        return (
            session,
            line,
            item_html(card),
            instructions_html(card.question.instructions),
            label,
            text,
            gr.update(interactive=s is not None),
            *pick_updates,
            gr.update(choices=list(card.question.names), value=None),
        )

    def start_queue(key: str, queue_name: str, request: gr.Request) -> tuple:
        strategy = QUEUES.get(queue_name)
        if strategy is None:
            raise refusal(f"no queue named {queue_name!r}; choose one from the list")
        key = key or studio.schema()[1].questions[0].id  # Start pressed before the page filled the list
        run = pick_of(studio, "annotate", request)
        try:
            card = annotation.next_card(studio.db, studio.project, key, strategy, studio.annotator(request), run=run)
        except (ValueError, repo.NotFound) as exc:  # a setting a person can fix (DIFFJEV_OVERLAP), a wrong id
            raise refusal(exc) from None
        return show(card, strategy, run=run)

    def respond(session: dict | None, value: str | None, status: str, request: gr.Request) -> tuple:
        if not session:
            raise gr.Error("Press Start to take an item from the queue first.")
        card, strategy = session["card"], session["strategy"]
        who = studio.annotator(request)
        seconds = time.monotonic() - session["shown_at"]
        annotation.answer(studio.db, card, who, value, seconds, status)
        following = annotation.next_card(
            studio.db,
            studio.project,
            card.question.id,
            strategy,
            who,
            skip_item=card.item_id if status == "skipped" else None,
            run=session.get("run"),
        )
        return show(
            following, strategy, note=f"Saved {md_text(value or 'skip')} for the last item.", run=session.get("run")
        )

    def accept_answer(session: dict | None, request: gr.Request) -> tuple:
        card = session["card"] if session else None
        if card is not None and card.suggestion is None:
            raise gr.Error("There is no suggestion to accept here; pick an answer with its number.")
        return respond(session, card.suggestion["answer"] if card else None, "submitted", request)

    def undo_last(session: dict | None, key: str, queue_name: str, request: gr.Request) -> tuple:
        who = studio.annotator(request)
        project_id, schema, rows, _ = studio.schema()
        back = annotation.undo_last(studio.db, project_id, who)
        strategy = session["strategy"] if session else QUEUES[queue_name]
        run_id = session.get("run") if session else None  # the picked run, or each item's latest read
        if back is None:
            return show(session["card"] if session else None, strategy, note="Nothing to undo.", run=run_id)
        item_id, row = back
        key = next(k for k, r in rows.items() if r == row)
        card = annotation.load_card(
            studio.db,
            project_id,
            item_id,
            schema.question(key),
            row,
            run_id,
            who,
            blind=session["card"].blind if session else False,
        )
        return show(card, strategy, note="Undone: the last answer is back for another look.", run=run_id)

    def picker(k: int):
        def pick(session: dict | None, request: gr.Request) -> tuple:
            names = session["card"].question.names if session else ()
            return respond(session, names[k] if k < len(names) else None, "submitted", request)

        return pick

    def give_answer(session: dict | None, value: str | None, request: gr.Request) -> tuple:
        if not value:
            raise gr.Error("Choose an answer first.")
        return respond(session, value, "submitted", request)

    def skip_item(session: dict | None, request: gr.Request) -> tuple:
        return respond(session, None, "skipped", request)

    def questions() -> Any:  # the schema may have a new version since the server started
        current = [q.id for q in studio.schema()[1].questions]
        return gr.update(choices=current, value=current[0])

    studio.on_load.append((questions, [], [question]))
    studio.on_load.append((lambda: gr.update(choices=run_choices(studio), value=LATEST), [], [run_pick]))
    studio.on_load.append((lambda: background_line(studio.project), [], [prelabeling]))
    ticker.tick(
        lambda: background_line(studio.project), [], [prelabeling], api_visibility="private", show_progress="hidden"
    )
    # Answers skip Gradio's queue: each is a few milliseconds of work, and the queue's round trips would
    # cost more than the work itself on every key an annotator presses.
    fast = {"queue": False, "show_progress": "hidden"}
    keep_pick(studio, "annotate", run_pick)
    start.click(start_queue, [question, queue], outputs, api_name="annotate_start", **fast)
    accept.click(accept_answer, [state], outputs, api_name="accept", **fast)
    for k, button in enumerate(picks):
        button.click(picker(k), [state], outputs, api_name=f"pick_{k + 1}", **fast)
    skip.click(skip_item, [state], outputs, api_name="skip", **fast)
    give.click(give_answer, [state, any_answer], outputs, api_name="answer", **fast)
    undo.click(undo_last, [state, question, queue], outputs, api_name="undo", **fast)
