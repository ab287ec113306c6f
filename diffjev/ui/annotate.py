"""The Annotate tab: one item and one question at a time, the model's distribution beside it, and a key
for every action (Enter or A accepts, 1-9 picks an answer, S skips, U or Backspace undoes). Clicking an
answer in the distribution picks it. Undo reaches back only to when Start was pressed, on that question."""

from __future__ import annotations

import html
import math
import time
from typing import Any

import gradio as gr
from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml

from diffjev.images import ImageData
from diffjev.services import annotation
from diffjev.services.images import item_image
from diffjev.spans import span_words
from storage import repo
from diffjev.ui.context import Scope, Studio, md_text, quiet_without_project, refusal
from diffjev.ui.data import LATEST, LATEST_LABEL, keep_pick, pick_of, run_choices
from diffjev.ui.span_text import span_segments_html, span_words_with_confidence

MAX_KEYS = 9
# Under this share of the probability on the answers, the distribution is a guess and the tab says so.
LOW_LABEL_MASS = 0.1
HELP = (
    "**Keys:** Enter or A accept the model's answer · 1–9 pick an answer (or click it in the distribution) · "
    "S skip (it waits in the Skipped queue) · U or Backspace undo (back to when you pressed Start)"
)
# A span question has no answer names to pick by number: here Enter takes the model's spans, and the item
# view, which has the span widget, is where a span is corrected.
SPAN_HELP = (
    "**Keys:** Enter or A accept the model's span · S skip (it waits in the Skipped queue) · U or Backspace "
    "undo (back to when you pressed Start). To correct a span, switch **View** to the item view and select "
    "the words there."
)
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
    "Skipped (the items you skipped)": "skipped",
}
REMOVED = "This item was removed from the project (its import was undone or it was deleted); nothing was stored for it."
UNDONE_ANSWER = "Undone: the last answer is back for another look."
UNDONE_SKIP = "Undone: the skip is taken back; the item is here again."
START_FIRST = "⚠️ Press Start to take an item from the queue first."
NOTHING_TO_UNDO = "Nothing left to undo in this session (undo goes back to when you pressed Start, on this question)."

# Keyboard shortcuts: Gradio has none built in, so a small script clicks the tab's buttons by id. Keys
# are ignored while typing in a field, and act only while the Annotate tab is on screen.
KEYS_JS = """
<script>
document.addEventListener("keydown", (e) => {
  const t = e.target;
  if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable)) return;
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  // Enter on a focused button presses that button, as anywhere on the web (Start, Skip, Undo, a tab)
  if (e.key === "Enter" && t && t.closest && t.closest("button")) return;
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


FOCUS_THE_CARD_JS = """() => {
  document.activeElement?.blur();
  const accept = document.querySelector("#accept");
  const button = accept && (accept.tagName === "BUTTON" ? accept : accept.querySelector("button"));
  if (button && !button.disabled) button.focus();
  (button || document.querySelector("#item"))?.scrollIntoView({block: "nearest"});
}"""


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


def item_html(card: annotation.Card, marked_text: str | None = None) -> str:
    """The item as text: every character escaped, so markup in an item is shown, never run. `marked_text`:
    the text already cut into escaped pieces with spans marked (span_segments_html), shown instead."""
    fields = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in card.fields.items()
    )
    ident = html.escape(card.external_id or str(card.item_id))
    return (
        f"<div class='dj-item'><div class='dj-id'>item {ident}</div>"
        + (
            f"<div class='dj-text'>{html.escape(card.text)}</div>"
            if marked_text is None
            else f"<div class='dj-text dj-spantext'>{marked_text}</div>"
        )
        + (f"<table class='dj-fields'>{fields}</table>" if fields else "")
        + "</div>"
    )


def image_html(image: ImageData) -> str:
    """The item's image, inline as a data URL: the page gets it with the item its scope loaded, and there is
    no address from which another page could fetch it. A click zooms in and out; its type
    is one Pillow found in the bytes (PNG, JPEG, GIF, WebP), never markup."""
    zoom = "this.classList.toggle('dj-zoomed')"
    return (
        f"<div class='dj-image'><img src='{image.data_url()}' width='{image.width}' alt='Image of the item, "
        f"{image.width}×{image.height}' title='Click to zoom' onclick=\"{zoom}\"></div>"
    )


def item_with_image_html(
    card: annotation.Card | annotation.ItemCard, image: ImageData | None, item: str | None = None
) -> str:
    """The item as text (or as `item`, already drawn), with its image beside it where it has one: the same in
    both views of the tab."""
    item = item_html(card) if item is None else item
    return item if image is None else f"<div class='dj-with-image'>{image_html(image)}{item}</div>"


def span_item_html(card: annotation.Card) -> str:
    """A span question's item: its text with the chosen spans marked (the annotator's own, else the model's),
    as the item view marks them."""
    chosen = card.current if card.current is not None else (card.suggestion or {}).get("answer")
    return item_html(card, span_segments_html(card.text, chosen, card.question.kind))


def span_confidences(suggestion: dict | None) -> str:
    """A line naming each suggested span's words with the model's confidence in it; none where it has none."""
    spans = ((suggestion or {}).get("detail") or {}).get("spans") or []
    return f"  \nEach span: {md_text(span_words_with_confidence(spans))}" if spans else ""


def options_html(question) -> str:
    """The answers with their keys and the schema's descriptions, escaped: a description is anyone's text."""
    rows = "".join(
        f"<li><kbd>{i + 1 if i < MAX_KEYS else '·'}</kbd> <b>{html.escape(a.name)}</b>"
        + (f" — {html.escape(a.description)}" if a.description else "")
        + "</li>"
        for i, a in enumerate(question.alternatives)
    )
    return f"<ul class='dj-options' style='list-style: none; padding-left: 0'>{rows}</ul>"


def shown_answer(card: annotation.Card, value: str) -> str:
    """An answer as the tab shows it: a span answer ("14-26") with the words it marks."""
    if not annotation.is_span_question(card.question):
        return value
    return span_words(value, card.text, card.question.kind)


def bar_label(position: int, name: str) -> str:
    """An answer as its bar is labelled: with its key, since the bars are drawn most likely first while
    the keys follow the answers' order."""
    return f"[{position + 1}] {name}" if position < MAX_KEYS else name


def keyed_bars(names: tuple[str, ...], distribution: dict[str, float]) -> dict[str, float]:
    return {bar_label(k, name): distribution[name] for k, name in enumerate(names) if name in distribution}


def answer_of_bar(names: tuple[str, ...], clicked: Any) -> str | None:
    """The answer a clicked bar names (its label, or the bare name an API client sends), or None."""
    for k, name in enumerate(names):
        if clicked in (bar_label(k, name), name):
            return name
    return None


def made_by(suggestion: dict) -> str:
    """Which model made the suggestion: an imported run's is another tool's model, not the one the header
    names. The name is anyone's text, escaped."""
    model = suggestion.get("model")
    return f" · from {md_text(model)}" if model else ""


# At or above this entropy (as a share of the most there can be over the answers), a distribution is close
# to even and its top answer a guess: 21/22/21/21/16% over five answers is 0.997, 60/40 over two 0.971.
NEARLY_EVEN = 0.97


def guess_notice(suggestion: dict | None) -> str:
    """A warning line where the model's read is a guess, whatever answer is picked: it put little of its
    probability on the question's answers (low_mass_notice), or spread it nearly evenly over them."""
    if not suggestion:
        return ""
    low = low_mass_notice(suggestion.get("label_mass"))
    distribution = suggestion.get("distribution") or {}
    probs = [float(p) for p in distribution.values() if p and p > 0]
    if low or len(distribution) < 2 or not probs:
        return low
    evenness = -sum(p * math.log(p) for p in probs) / math.log(len(distribution))
    if evenness < NEARLY_EVEN:
        return ""
    return (
        f"  \n⚠ The model spread its probability nearly evenly over these answers (its top one has "
        f"{max(probs):.0%}): treat this as a guess."
    )


def low_mass_notice(label_mass: float | None) -> str:
    """A warning line when the model put little of its probability on the question's answers at all: the
    distribution drawn is then renormalised from scraps, and reads far surer than the model was."""
    if label_mass is None or label_mass >= LOW_LABEL_MASS:
        return ""
    percent = label_mass * 100
    share = f"{percent:.1f}%" if percent >= 0.1 else "less than 0.1%"
    return f"  \n⚠ The model put {share} of its probability on these answers: treat this as a guess."


def build(studio: Studio) -> None:
    with gr.Row():
        # Filled when the page loads, so the page and API description served before a login hold none of the
        # project's question ids; any value is checked against the project's schema by the service.
        question = gr.Dropdown([], label="Question", allow_custom_value=True, elem_id="annotate-question")
        queue = gr.Dropdown(list(QUEUES), value="Least confidence first", label="Queue", elem_id="annotate-queue")
        run_pick = gr.Dropdown([(LATEST_LABEL, LATEST)], value=LATEST, label="Suggestions from", elem_id="annotate-run")
        start = gr.Button("Start", elem_id="annotate-start")
    keys_help = gr.Markdown(HELP, elem_id="keys-help")
    ticker = gr.Timer(2.0)
    progress = gr.Markdown(elem_id="annotate-progress")
    with gr.Row():
        with gr.Column(scale=3):
            item = gr.HTML(elem_id="item")
        with gr.Column(scale=2):
            prompt = gr.HTML(elem_id="question-text")  # instructions_html: Markdown would load images
            options = gr.HTML(elem_id="answer-options")
            # Hidden and shown again through its column, as the answer list through its row: Gradio 6.31's
            # page loses a Label or a Dropdown whose own visibility was turned off and on.
            with gr.Column(min_width=0) as distribution_box:
                distribution = gr.Label(
                    label="Model's distribution (click an answer to pick it)", elem_id="distribution"
                )
            info = gr.Markdown(elem_id="suggestion-info")
    with gr.Row():
        accept = gr.Button("Accept (Enter)", variant="primary", elem_id="accept")
        picks = [gr.Button(f"{k}", visible=False, elem_id=f"pick-{k}") for k in range(1, MAX_KEYS + 1)]
        skip = gr.Button("Skip (S)", elem_id="skip")
        undo = gr.Button("Undo (U)", elem_id="undo")
    with gr.Row() as answer_row:  # every answer, for questions with more than nine
        any_answer = gr.Dropdown([], label="Any answer", elem_id="pick-any")
        give = gr.Button("Answer", elem_id="pick-any-go")
    state = gr.State(None)
    outputs = [state, progress, item, prompt, options, distribution, info, accept, *picks, any_answer]
    outputs += [keys_help, answer_row, distribution_box]  # what a span question hides or words otherwise

    def session_scope(session: dict, request: gr.Request) -> Scope:
        """The request's scope, which must be the project this tab's session was started on: answers go to
        the project of the card on screen, and only while the user may still answer in it."""
        scope = studio.scope(request)
        if scope.key != session.get("project_key"):
            raise refusal(f"this Annotate session was started on another project than {scope.project}: press Start")
        return scope

    def show(card: annotation.Card | None, annotating: dict, who: str, note: str = "") -> tuple:
        """The page for a card, or for an empty queue with its reason. `annotating` is what Start set up
        (queue, question, undo mark); it stays in the state when the queue is empty, so undo still works."""
        annotating = {**annotating, "card": card, "shown_at": time.monotonic()}
        if card is None:
            reason = annotation.empty_queue_reason(
                studio.db,
                annotating["project"],
                annotating["question"],
                annotating["strategy"],
                who,
                annotating.get("run"),
            )
            return (
                annotating,
                f"{note} **Nothing left in this queue.** {md_text(reason)}".strip(),
                "",
                "",
                "",
                None,
                "",
                gr.update(interactive=False),
                *[gr.update(visible=False) for _ in picks],
                gr.update(choices=[], value=None),
                HELP,
                gr.update(visible=True),
                gr.update(visible=True),
            )
        done, total = annotation.progress(studio.db, card.project_id, card.question_row)
        line = f"{done} of {total} items answered for **{card.question.id}**, {total - done} to go. {note}"
        s = card.suggestion
        spans = annotation.is_span_question(card.question)  # no answer names: nothing to pick, no distribution
        if s is None:
            label, text = None, ("Suggestion hidden: blind slice." if card.blind else "No suggestion for this item.")
        else:
            label = keyed_bars(card.question.names, s["distribution"])
            text = f"Model: **{md_text(shown_answer(card, s['answer']))}**, confidence {s['confidence']:.2f}"
            if s.get("stderr") is not None:
                text += f" ± {s['stderr']:.2f} over {s['draws']} reads"
            if s.get("calibrated") is not None:
                text += f"; calibrated confidence {s['calibrated']:.2f}"
            text += made_by(s)
            text += guess_notice(s)
            if spans:
                text += span_confidences(s)
        if card.current is not None:
            text += f"  \nYour current answer: **{md_text(shown_answer(card, card.current))}**"
        pick_updates = [
            gr.update(
                visible=i < len(card.question.names),
                value=f"{i + 1} {card.question.names[i]}" if i < len(card.question.names) else "",
            )
            for i in range(MAX_KEYS)
        ]
        image = item_image(studio.db, card.project_id, card.item_id)  # the card's item, in the scope's project
        return (
            annotating,
            line,
            item_with_image_html(card, image, span_item_html(card) if spans else None),
            instructions_html(card.question.instructions),
            options_html(card.question),
            label,
            text,
            gr.update(interactive=s is not None),
            *pick_updates,
            gr.update(choices=list(card.question.names), value=None),
            SPAN_HELP if spans else HELP,
            gr.update(visible=not spans),
            gr.update(visible=not spans),
        )

    def start_queue(key: str, queue_name: str, request: gr.Request) -> tuple:
        strategy = QUEUES.get(queue_name)
        if strategy is None:
            raise refusal(f"no queue named {queue_name!r}; choose one from the list")
        scope = studio.scope(request)
        project_id, schema, rows, _ = studio.schema(scope)
        key = key or schema.questions[0].id  # Start pressed before the page filled the list
        who = scope.user
        run = pick_of(studio, "annotate", request)  # None: each item's latest read
        # The session starts here: undo takes back answers to this question given from now on, nothing older.
        mark = annotation.undo_mark(studio.db, project_id)
        try:
            card = annotation.next_card(studio.db, scope.project, key, strategy, who, run=run)
        except (ValueError, repo.NotFound) as exc:  # a setting a person can fix (DIFFJEV_OVERLAP), a wrong id
            raise refusal(exc) from None
        started = {"project": scope.project, "project_key": scope.key, "strategy": strategy, "question": key}
        started.update(row=rows[key], mark=mark)
        return show(card, {**started, "run": run}, who)

    def respond(session: dict | None, value: str | None, status: str, request: gr.Request) -> tuple:
        if not session or session.get("card") is None:
            return only_a_note(START_FIRST)
        card, strategy = session["card"], session["strategy"]
        who = session_scope(session, request).user
        seconds = time.monotonic() - session["shown_at"]
        try:
            annotation.answer(studio.db, card, who, value, seconds, status)
        except annotation.ItemRemoved:
            following = next_after(card, session, who)
            return show(following, session, who, note=REMOVED + (" Here is the next one." if following else ""))
        following = annotation.next_card(
            studio.db,
            session["project"],
            card.question.id,
            strategy,
            who,
            skip_item=card.item_id if status == "skipped" else None,
            run=session.get("run"),
        )
        if status == "skipped":
            note = "Skipped the last item: it waits in the 'Skipped' queue."
        else:
            note = f"Saved {md_text(value)} for the last item."
        return show(following, session, who, note=note)

    def next_after(card: annotation.Card, session: dict, who: str) -> annotation.Card | None:
        return annotation.next_card(
            studio.db, session["project"], card.question.id, session["strategy"], who, run=session.get("run")
        )

    def accept_answer(session: dict | None, request: gr.Request) -> tuple:
        card = session["card"] if session else None
        if card is not None and card.suggestion is None:
            return only_a_note("There is no suggestion to accept here; pick an answer with its number.")
        return respond(session, card.suggestion["answer"] if card else None, "submitted", request)

    def only_a_note(note: str) -> tuple:
        """The page as it is, with a note in the progress line: how these events (which skip Gradio's
        queue) say what they refuse to do, since Gradio 6.31's page shows no message of theirs raised."""
        return tuple(note if output is progress else gr.update() for output in outputs)

    def undo_last(session: dict | None, request: gr.Request) -> tuple:
        if not session:  # Start not pressed: this session has answered nothing
            return only_a_note(NOTHING_TO_UNDO)
        scope = session_scope(session, request)
        who = scope.user
        project_id, schema, rows, _ = studio.schema(scope)
        run_id = session.get("run")  # the picked run, or (None) each item's latest read
        # Only this session's question, and only since Start: the card never switches question under the
        # dropdown, and an earlier session's answers are never taken back by a key pressed now.
        back = annotation.undo_last(studio.db, project_id, who, session["row"], session["mark"])
        if back is None:
            if session["card"] is None:
                return only_a_note(NOTHING_TO_UNDO)
            return show(session["card"], session, who, note=NOTHING_TO_UNDO)
        item_id, row = back
        card = annotation.load_card(
            studio.db,
            project_id,
            item_id,
            annotation.project_question(schema, session["question"]),
            row,
            run_id,
            who,
            blind=session["strategy"] == "blind",
        )
        skipped = annotation.last_undo_was_a_skip(studio.db, project_id, who)
        return show(card, session, who, note=UNDONE_SKIP if skipped else UNDONE_ANSWER)

    def picker(k: int):
        def pick(session: dict | None, request: gr.Request) -> tuple:
            names = session["card"].question.names if session else ()
            return respond(session, names[k] if k < len(names) else None, "submitted", request)

        return pick

    def give_answer(session: dict | None, value: str | None, request: gr.Request) -> tuple:
        if not value:
            return only_a_note("Choose an answer first.")
        return respond(session, value, "submitted", request)

    def skip_item(session: dict | None, request: gr.Request) -> tuple:
        return respond(session, None, "skipped", request)

    def click_answer(session: dict | None, clicked: gr.SelectData, request: gr.Request) -> tuple:
        card = session["card"] if session else None
        name = answer_of_bar(card.question.names, clicked.value) if card is not None else None
        if name is None:
            return only_a_note(START_FIRST)
        return respond(session, name, "submitted", request)

    def questions(request: gr.Request) -> Any:  # the schema may have a new version since the server started
        current = [q.id for q in studio.schema(studio.scope(request))[1].questions]
        return gr.update(choices=current, value=current[0])

    def pick_up_reads(session: dict | None, request: gr.Request) -> tuple:
        """On every tick: where the card shows no suggestion yet, or the queue is empty, and a read was
        stored since the last look, show the card's new suggestion or the queue's first card. A card with
        a suggestion is never touched, and the card being answered is never swapped for another item.

        The session is updated in place, never returned: an answer given meanwhile replaces the session,
        and a tick that started before it must not put the old card back."""
        unchanged = tuple(gr.skip() for _ in outputs[1:])
        card = session.get("card") if session else None
        if not session or (card is not None and (card.suggestion is not None or card.blind)):
            return unchanged
        scope = session_scope(session, request)
        mark = annotation.reads_mark(studio.db, scope.project_id)
        if mark == session.get("reads_mark"):
            return unchanged
        session["reads_mark"] = mark
        who = scope.user
        if card is None:
            card = annotation.next_card(
                studio.db, scope.project, session["question"], session["strategy"], who, run=session.get("run")
            )
            page = show(card, session, who)
        else:
            card = annotation.load_card(
                studio.db, card.project_id, card.item_id, card.question, card.question_row, session.get("run"), who
            )
            if card.suggestion is None:
                return unchanged
            page = show(card, session, who)
            page[0]["shown_at"] = session["shown_at"]  # the time spent on the item counts from when it was shown
        session.update(page[0])
        return page[1:]

    def runs_listed(request: gr.Request) -> Any:
        return gr.update(choices=run_choices(studio, studio.scope(request)), value=LATEST)

    studio.on_load.append((questions, [], [question]))
    studio.on_load.append((runs_listed, [], [run_pick]))
    ticker.tick(
        quiet_without_project(pick_up_reads, outputs[1:]),
        [state],
        outputs[1:],
        api_visibility="private",
        show_progress="hidden",
    )
    # Answers skip Gradio's queue: each is a few milliseconds of work, and the queue's round trips would
    # cost more than the work itself on every key an annotator presses.
    fast = {"queue": False, "show_progress": "hidden"}
    keep_pick(studio, "annotate", run_pick)
    # The card, not Start, has the keys then: Enter accepts; the focused Accept button scrolls into view
    start.click(start_queue, [question, queue], outputs, api_name="annotate_start", **fast).then(
        None, None, None, js=FOCUS_THE_CARD_JS
    )
    # each of these stores or takes back an answer: the picker's share answered follows
    studio.after_answers(accept.click(accept_answer, [state], outputs, api_name="accept", **fast))
    for k, button in enumerate(picks):
        studio.after_answers(button.click(picker(k), [state], outputs, api_name=f"pick_{k + 1}", **fast))
    studio.after_answers(skip.click(skip_item, [state], outputs, api_name="skip", **fast))
    studio.after_answers(give.click(give_answer, [state, any_answer], outputs, api_name="answer", **fast))
    studio.after_answers(undo.click(undo_last, [state], outputs, api_name="undo", **fast))
    studio.after_answers(distribution.select(click_answer, [state], outputs, api_name="pick_clicked", **fast))
