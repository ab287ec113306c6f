"""The Annotate tab's item view: the item once, every question of the schema with the model's distribution
beside it and its suggested answer (or the annotator's own) preselected. Keys: Tab / Shift+Tab or the up and
down arrows move between questions, 1-9 or the left and right arrows pick within the focused question,
Enter accepts the whole item as shown, S skips it, U undoes the last item. Clicking an answer picks it.

The page holds the choices: a script (KEYS_JS) writes them as JSON into a hidden textbox and clicks a hidden
button, so one request stores the whole item and brings the next. "One question at a time" stays a switch,
and is the default for a schema of more than MAX_ITEM_VIEW_QUESTIONS questions."""

from __future__ import annotations

import html
import json
import time

import gradio as gr

from diffjev.images import ImageData
from diffjev.services import annotation
from diffjev.services.images import item_image
from diffjev.ui import annotate
from diffjev.ui.context import Studio, md_text, quiet_without_project, refusal

MAX_ITEM_VIEW_QUESTIONS = 6
MAX_KEYS = 9
WHOLE_ITEM = "Whole item"
ONE_QUESTION = "One question at a time"
QUEUES = {
    "Unlabeled, in order": "in_order",
    "Least confidence first (the item's least sure question)": "least_confidence",
    "Skipped (the items you skipped)": "skipped",
}
HELP = (
    "**Keys:** Tab / Shift+Tab or ↑ ↓ move between questions · 1–9 or ← → pick an answer (or click it) · "
    "Enter accepts the whole item as shown · S skip · U undo the last item"
)
NOTHING_TO_UNDO = "Nothing left to undo in this session (undo goes back to when you pressed Start)."
START_FIRST = annotate.START_FIRST

CSS = """
.dj-hidden { display: none !important; }
.dj-iq { border: 1px solid #e5e7eb; border-radius: 6px; padding: 6px 10px; margin-bottom: 8px; }
.dj-iq.dj-focus { border-color: #2563eb; box-shadow: 0 0 0 2px #bfdbfe; }
.dj-iq .dj-missing { color: #b91c1c; font-size: .85em; }
.dj-opt { display: grid; grid-template-columns: 2em 12em 1fr 3.5em; align-items: center; gap: 6px;
  cursor: pointer; padding: 2px 4px; border-radius: 4px; }
.dj-opt.dj-chosen { background: #dbeafe; font-weight: 600; }
.dj-bar { height: .8em; background: #93c5fd; border-radius: 2px; }
.dj-model { color: #6b7280; font-weight: normal; border: 1px solid #d1d5db; border-radius: 3px; padding: 0 3px; }
.dj-with-image { display: flex; gap: 12px; align-items: flex-start; }
.dj-image { flex: 0 1 50%; max-height: 70vh; overflow: auto; border: 1px solid #e5e7eb; border-radius: 6px; }
.dj-image img { display: block; max-width: 100%; cursor: zoom-in; }
.dj-image img.dj-zoomed { max-width: none; width: 200%; cursor: zoom-out; }
"""

# Keys and clicks of the item view, acting only while it is on screen and no field has the focus. The
# choices live in the page (data-chosen on each question) until Enter or S sends them.
KEYS_JS = """
<script>
(() => {
  const view = () => { const v = document.getElementById("itemview"); return v && v.offsetParent !== null ? v : null; };
  const questions = (v) => Array.from(v.querySelectorAll(".dj-iq"));
  const focusAt = (v, i) => {
    const qs = questions(v); if (!qs.length) return;
    const k = (i + qs.length) % qs.length;
    qs.forEach((q, j) => q.classList.toggle("dj-focus", j === k));
  };
  const focused = (v) => Math.max(0, questions(v).findIndex((q) => q.classList.contains("dj-focus")));
  const choose = (q, opt) => {
    if (!opt) return;
    q.dataset.chosen = opt.dataset.v;
    q.querySelectorAll(".dj-opt").forEach((o) => o.classList.toggle("dj-chosen", o === opt));
    const missing = q.querySelector(".dj-missing"); if (missing) missing.remove();
  };
  const send = (v, button) => {
    const choices = {};
    questions(v).forEach((q) => { if (q.dataset.chosen !== undefined) choices[q.dataset.q] = q.dataset.chosen; });
    const box = document.querySelector("#itemview-choices textarea, #itemview-choices input");
    box.value = JSON.stringify(choices);
    box.dispatchEvent(new Event("input", { bubbles: true }));
    const b = document.getElementById(button);
    const el = b && (b.tagName === "BUTTON" ? b : b.querySelector("button"));
    setTimeout(() => el && el.click(), 0);
  };
  document.addEventListener("click", (e) => {
    const opt = e.target.closest && e.target.closest("#itemview .dj-opt");
    if (!opt) return;
    const v = view(); if (!v) return;
    const q = opt.closest(".dj-iq");
    choose(q, opt); focusAt(v, questions(v).indexOf(q));
  });
  document.addEventListener("keydown", (e) => {
    const v = view(); if (!v) return;
    const t = e.target;
    const typing = t && (["INPUT", "TEXTAREA", "SELECT"].includes(t.tagName) || t.isContentEditable);
    if (typing) return;
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const qs = questions(v);
    if (e.key === "u" || e.key === "U") { e.preventDefault(); send(v, "item-undo"); return; }
    if (!qs.length) return;
    const i = focused(v), q = qs[i];
    const opts = Array.from(q.querySelectorAll(".dj-opt"));
    const at = opts.findIndex((o) => o.classList.contains("dj-chosen"));
    if (e.key === "Tab" || e.key === "ArrowDown" || e.key === "ArrowUp") {
      focusAt(v, i + ((e.key === "ArrowUp" || (e.key === "Tab" && e.shiftKey)) ? -1 : 1));
    } else if (/^[1-9]$/.test(e.key)) {
      choose(q, opts[Number(e.key) - 1]);
    } else if (e.key === "ArrowRight" || e.key === "ArrowLeft") {
      const step = e.key === "ArrowRight" ? 1 : -1;
      choose(q, opts[((at < 0 ? (step > 0 ? -1 : 0) : at) + step + opts.length) % opts.length]);
    } else if (e.key === "Enter") {
      send(v, "item-accept");
    } else if (e.key === "s" || e.key === "S") {
      send(v, "item-skip");
    } else return;
    e.preventDefault();
  });
})();
</script>
"""


def question_html(index: int, entry: annotation.Entry) -> str:
    """One question: its instructions, and every answer with its key, its share of the model's
    distribution as a bar, and the preselected one marked. Everything from the schema or the model is
    escaped: a question's text, an answer's name and its description are anyone's."""
    chosen = entry.preselected
    distribution = entry.suggestion["distribution"] if entry.suggestion else {}
    model = entry.suggestion["answer"] if entry.suggestion else None
    rows = []
    for k, alternative in enumerate(entry.question.alternatives):
        name = alternative.name
        share = float(distribution.get(name, 0.0))
        key = str(k + 1) if k < MAX_KEYS else "·"
        rows.append(
            f"<div class='dj-opt{' dj-chosen' if name == chosen else ''}' data-v='{html.escape(name)}'>"
            f"<kbd>{key}</kbd><span>{html.escape(name)}"
            + (" <small class='dj-model'>model</small>" if name == model else "")
            + "</span>"
            f"<span class='dj-bar' style='width: {share * 100:.1f}%'></span>"
            f"<span>{share * 100:.0f}%</span></div>"
        )
    chosen_attr = "" if chosen is None else f" data-chosen='{html.escape(chosen)}'"
    missing = "" if chosen is not None else "<div class='dj-missing'>No suggestion: pick an answer.</div>"
    guess = annotate.low_mass_notice(entry.suggestion.get("label_mass")) if entry.suggestion else ""
    if guess:  # the model put almost nothing on these answers: its bars are a guess
        missing += f"<div class='dj-missing'>{html.escape(guess.strip())}</div>"
    focus = " dj-focus" if index == 0 else ""
    return (
        f"<div class='dj-iq{focus}' data-q='{html.escape(entry.question.id)}'{chosen_attr}>"
        f"{annotate.instructions_html(entry.question.instructions)}{missing}{''.join(rows)}</div>"
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


def item_view_html(card: annotation.ItemCard, image: ImageData | None = None) -> str:
    """The item once (its image, where it has one, beside its text), then every question asked of it (a
    question that does not apply is left out)."""
    questions = "".join(question_html(i, entry) for i, entry in enumerate(card.asked))
    item = annotate.item_html(card)
    if image is not None:
        item = f"<div class='dj-with-image'>{image_html(image)}{item}</div>"
    return f"{item}<div class='dj-questions'>{questions}</div>"


def progress_line(db, card: annotation.ItemCard, note: str) -> str:
    counts, total = annotation.item_progress(db, card.project_id, {e.question.id: e.row for e in card.entries})
    done = " · ".join(f"{md_text(key)} {n} of {total}" for key, n in counts.items())
    return f"Answered: {done}. {note}".strip()


def build(studio: Studio) -> None:
    with gr.Row():
        queue = gr.Dropdown(list(QUEUES), value=list(QUEUES)[1], label="Queue", elem_id="itemview-queue")
        start = gr.Button("Start", elem_id="itemview-start")
    gr.Markdown(HELP, elem_id="itemview-help")
    progress = gr.Markdown(elem_id="itemview-progress")
    view = gr.HTML(elem_id="itemview")
    with gr.Row():
        accept = gr.Button("Accept item (Enter)", variant="primary", elem_id="item-accept-shown")
        skip = gr.Button("Skip (S)", elem_id="item-skip-shown")
        undo = gr.Button("Undo item (U)", elem_id="item-undo-shown")
    # What the script sends: the page's choices as JSON, and the buttons it clicks with them.
    choices = gr.Textbox(elem_id="itemview-choices", elem_classes=["dj-hidden"], show_label=False)
    send_accept = gr.Button(elem_id="item-accept", elem_classes=["dj-hidden"])
    send_skip = gr.Button(elem_id="item-skip", elem_classes=["dj-hidden"])
    send_undo = gr.Button(elem_id="item-undo", elem_classes=["dj-hidden"])
    state = gr.State(None)
    outputs = [state, progress, view]

    def show(card: annotation.ItemCard | None, session: dict, note: str = "") -> tuple:
        session = {**session, "card": card, "shown_at": time.monotonic()}
        if card is None:
            reason = annotation.empty_item_queue_reason(
                studio.db, session["project"], session["strategy"], session["user"]
            )
            return session, f"{note} **Nothing left in this queue.** {md_text(reason)}".strip(), ""
        image = item_image(studio.db, card.project_id, card.item_id)  # the card's item, in the scope's project
        return session, progress_line(studio.db, card, note), item_view_html(card, image)

    def next_card(session: dict, who: str, skip_item: int | None = None) -> annotation.ItemCard | None:
        return annotation.next_item_card(studio.db, session["project"], session["strategy"], who, skip_item)

    def start_queue(queue_name: str, request: gr.Request) -> tuple:
        strategy = QUEUES.get(queue_name)
        if strategy is None:
            raise refusal(f"no queue named {queue_name!r}; choose one from the list")
        scope = studio.scope(request)
        mark = annotation.undo_mark(studio.db, scope.project_id)
        session = {"project": scope.project, "project_key": scope.key, "user": scope.user, "strategy": strategy}
        session["mark"] = mark
        return show(next_card(session, scope.user), session)

    def current(session: dict, request: gr.Request) -> tuple[dict, annotation.ItemCard, str]:
        scope = studio.scope(request)
        if scope.key != session.get("project_key"):
            raise gr.Error("This page's project changed (or was deleted and made again): press Start again.")
        return session, session["card"], scope.user

    def parsed(raw: str | None) -> dict:
        try:
            value = json.loads(raw or "{}")
        except (json.JSONDecodeError, RecursionError):  # not JSON, or nested past what the parser can hold
            value = None
        if not isinstance(value, dict):
            raise gr.Error("The choices sent are not a JSON object of question id to answer.")
        return value

    # These events skip Gradio's queue, and Gradio 6.31's page shows no message such an event raises: what
    # a person does in the page and is refused (no item yet, a question left unanswered) is said in the
    # progress line instead, the item left as it is on screen.
    def accept_item(session: dict | None, raw: str | None, request: gr.Request) -> tuple:
        if not session or session.get("card") is None:
            return gr.skip(), START_FIRST, gr.skip()
        session, card, who = current(session, request)
        seconds = time.monotonic() - session["shown_at"]
        try:
            annotation.accept_item(studio.db, card, who, parsed(raw), seconds)
        except annotation.ItemRemoved as exc:
            return show(next_card(session, who), session, note=md_text(exc))
        except annotation.MissingAnswer as exc:
            return gr.skip(), f"⚠️ {md_text(exc)}. Nothing was stored for this item.", gr.skip()
        except (ValueError, annotation.repo.StaleWrite) as exc:  # an answer no page offers, a changed answer
            raise refusal(exc) from None
        return show(next_card(session, who), session, note="Saved the last item.")

    def skip_item(session: dict | None, request: gr.Request) -> tuple:
        if not session or session.get("card") is None:
            return gr.skip(), START_FIRST, gr.skip()
        session, card, who = current(session, request)
        try:
            annotation.skip_item(studio.db, card, who, time.monotonic() - session["shown_at"])
        except annotation.ItemRemoved as exc:
            return show(next_card(session, who), session, note=md_text(exc))
        note = "Skipped the last item: it waits in the 'Skipped' queue."
        return show(next_card(session, who, skip_item=card.item_id), session, note=note)

    def undo_item(session: dict | None, request: gr.Request) -> tuple:
        if not session:
            return gr.update(), NOTHING_TO_UNDO, gr.update()
        scope = studio.scope(request)
        if scope.key != session.get("project_key"):
            raise gr.Error("This page's project changed (or was deleted and made again): press Start again.")
        who = scope.user
        project_id, schema, rows, _ = annotation.project_schema(studio.db, scope.project)
        back = annotation.undo_last_item(studio.db, project_id, who, session["mark"])
        if back is None:
            return session, NOTHING_TO_UNDO, gr.update()
        item_id, status = back
        given = set(annotation.given_questions(studio.db, project_id, who, schema, rows))
        card = annotation.load_item_card(studio.db, project_id, item_id, schema, rows, None, who, given=given)
        note = "Undone: the skip is taken back." if status == "skipped" else "Undone: the last item's answers."
        return show(card, session, note=note)

    def pick_up_reads(session: dict | None, request: gr.Request) -> tuple:
        """On every tick: where the item on screen has no suggestion for any question yet, or the queue is
        empty, and a read was stored since the last look, show the item's new suggestions or the queue's
        first item. An item with a suggestion is never redrawn (the answers picked on it stay), and the item
        being answered is never swapped for another. The session is updated in place (see the one-question
        view's pick_up_reads)."""
        unchanged = (gr.skip(), gr.skip())
        card = session.get("card") if session else None
        if not session or (card is not None and any(e.suggestion for e in card.asked)):
            return unchanged
        scope = studio.scope(request)
        if scope.key != session.get("project_key"):
            return unchanged
        mark = annotation.reads_mark(studio.db, scope.project_id)
        if mark == session.get("reads_mark"):
            return unchanged
        session["reads_mark"] = mark
        if card is None:
            page = show(next_card(session, scope.user), session)
        else:
            _, schema, rows, _ = annotation.project_schema(studio.db, scope.project)
            given = {e.row for e in card.asked}
            card = annotation.load_item_card(
                studio.db, card.project_id, card.item_id, schema, rows, None, scope.user, given=given
            )
            if not any(e.suggestion for e in card.asked):
                return unchanged
            page = show(card, session)
            page[0]["shown_at"] = session["shown_at"]  # the time spent on the item counts from when it was shown
        session.update(page[0])
        return page[1:]

    ticker = gr.Timer(2.0)
    ticker.tick(
        quiet_without_project(pick_up_reads, outputs[1:]),
        [state],
        outputs[1:],
        api_visibility="private",
        show_progress="hidden",
    )
    fast = {"queue": False, "show_progress": "hidden"}
    start.click(start_queue, [queue], outputs, api_name="item_start", **fast)
    send_accept.click(accept_item, [state, choices], outputs, api_name="item_accept", **fast)
    send_skip.click(skip_item, [state], outputs, api_name="item_skip", **fast)
    send_undo.click(undo_item, [state], outputs, api_name="item_undo", **fast)
    # The shown buttons send what the page holds, the way the keys do.
    for shown, target in ((accept, "item-accept"), (skip, "item-skip"), (undo, "item-undo")):
        shown.click(None, js=f"() => document.dispatchEvent(new KeyboardEvent('keydown', {{key: '{_KEY[target]}'}}))")


_KEY = {"item-accept": "Enter", "item-skip": "s", "item-undo": "u"}


def build_tab(studio: Studio) -> None:
    """The Annotate tab: a switch between the item view and the one-question view, set when the page
    loads by the size of the project's schema."""
    mode = gr.Radio([WHOLE_ITEM, ONE_QUESTION], value=WHOLE_ITEM, label="View", elem_id="annotate-mode")
    annotate.build_prelabel_line(studio)
    with gr.Column() as whole_item:
        build(studio)
    with gr.Column(visible=False) as one_question:
        annotate.build(studio)

    def switch(choice: str) -> tuple:
        return gr.update(visible=choice == WHOLE_ITEM), gr.update(visible=choice == ONE_QUESTION)

    def default_mode(request: gr.Request) -> tuple:
        schema = studio.schema(studio.scope(request))[1]
        choice = WHOLE_ITEM if len(schema.questions) <= MAX_ITEM_VIEW_QUESTIONS else ONE_QUESTION
        return (choice, *switch(choice))

    mode.change(switch, [mode], [whole_item, one_question], api_visibility="private", queue=False)
    studio.on_load.append((default_mode, [], [mode, whole_item, one_question]))
