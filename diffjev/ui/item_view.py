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
from diffjev.ui import annotate, data
from diffjev.ui.context import Studio, md_text, quiet_without_project, refusal
from diffjev.ui.span_text import chosen_text, span_segments_html, span_suggestion_line

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
.dj-iq { border: 1px solid #e5e7eb; border-radius: 6px; padding: 6px 10px; margin-bottom: 8px;
  scroll-margin-bottom: 80px; }  /* scrolled into view above the actions bar, not under it */
/* Accept, Skip and Undo stay on screen below a long item: at 1366x768 the card starts halfway down. */
/* Gradio's container hides overflow, which makes it a scroll box that a sticky bar sticks to, not the
   window; clip cuts off the same overflow without becoming one. */
.gradio-container { overflow: clip !important; }
#itemview-actions { position: sticky; bottom: 0; z-index: 5; padding: 8px 0;
  background: var(--background-fill-primary, #fff); }
.dj-iq.dj-focus { border-color: #2563eb; box-shadow: 0 0 0 2px #bfdbfe; }
.dj-iq.dj-off { display: none; }
.dj-iq .dj-missing, .dj-iq .dj-guess { color: #b91c1c; font-size: .85em; }
.dj-opt { display: grid; grid-template-columns: 2em 12em 1fr 3.5em; align-items: center; gap: 6px;
  cursor: pointer; padding: 2px 4px; border-radius: 4px; }
.dj-opt.dj-chosen { background: #dbeafe; font-weight: 600; }
.dj-bar { height: .8em; background: #93c5fd; border-radius: 2px; }
.dj-model { color: #6b7280; font-weight: normal; border: 1px solid #d1d5db; border-radius: 3px; padding: 0 3px; }
.dj-spantext { white-space: pre-wrap; border: 1px solid #e5e7eb; border-radius: 4px; padding: 4px 6px; cursor: text;
  user-select: text; line-height: 1.6; }
.dj-mark { background: #fde68a; border-bottom: 2px solid #d97706; }
.dj-spaninfo { color: #374151; font-size: .9em; }
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
  const questions = (v) => Array.from(v.querySelectorAll(".dj-iq:not(.dj-off)"));
  // A staged question (data-ask-if) is shown only while the answers chosen above it meet its condition; a
  // question hidden counts as unanswered, so the check repeats until nothing changes (chains settle).
  const settle = (v) => {
    const all = Array.from(v.querySelectorAll(".dj-iq"));
    for (let round = 0; round <= all.length; round++) {
      const value = {};
      all.forEach((q) => { value[q.dataset.q] = q.classList.contains("dj-off") ? null : (q.dataset.chosen ?? null); });
      let changed = false;
      all.forEach((q) => {
        if (!q.dataset.askIf) return;
        const on = Object.entries(JSON.parse(q.dataset.askIf)).every(([id, wanted]) => wanted.includes(value[id]));
        if (on === q.classList.contains("dj-off")) { q.classList.toggle("dj-off", !on); changed = true; }
      });
      if (!changed) break;
    }
    if (!questions(v).some((q) => q.classList.contains("dj-focus"))) {
      all.forEach((q) => q.classList.remove("dj-focus"));
      const first = questions(v)[0]; if (first) first.classList.add("dj-focus");
    }
  };
  const focusAt = (v, i) => {
    const qs = questions(v); if (!qs.length) return;
    const k = (i + qs.length) % qs.length;
    qs.forEach((q, j) => q.classList.toggle("dj-focus", j === k));
    qs[k].scrollIntoView({block: "nearest"});  // the focused question is always on screen
  };
  const focused = (v) => Math.max(0, questions(v).findIndex((q) => q.classList.contains("dj-focus")));
  const choose = (q, opt) => {
    if (!opt) return;
    q.dataset.chosen = opt.dataset.v;
    q.querySelectorAll(".dj-opt").forEach((o) => o.classList.toggle("dj-chosen", o === opt));
    const missing = q.querySelector(".dj-missing"); if (missing) missing.remove();
    const v = view(); if (v) settle(v);
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
  // Span questions. Offsets are code points into the item text (Python's str indices), end exclusive; the
  // browser counts UTF-16 units, so every count goes through Array.from. Each rendered segment carries its
  // code point offset (data-o): a carriage return is not rendered (the HTML parser would fold CRLF), yet
  // the offsets after it stay the text's own.
  const chars = (q) => Array.from(JSON.parse(q.dataset.text));
  const spansOf = (q) => {
    const v = q.dataset.chosen;
    if (!v || v === "none") return [];
    return v.split(",").map((p) => p.split("-").map(Number));
  };
  const setSpans = (q, spans) => {
    spans = spans.filter((s) => s[1] > s[0]).sort((a, b) => a[0] - b[0]);
    q.dataset.chosen = spans.length ? spans.map((s) => s[0] + "-" + s[1]).join(",") : "none";
    paint(q);
    const missing = q.querySelector(".dj-missing"); if (missing) missing.remove();
  };
  const paint = (q) => {
    const cs = chars(q), spans = spansOf(q), box = q.querySelector(".dj-spantext");
    const cuts = new Set([0, cs.length]);
    spans.forEach((s) => { cuts.add(s[0]); cuts.add(s[1]); });
    cs.forEach((c, i) => { if (c === "\\r") { cuts.add(i); cuts.add(i + 1); } });
    const at = Array.from(cuts).filter((i) => i <= cs.length).sort((a, b) => a - b);
    box.replaceChildren();
    for (let k = 0; k + 1 < at.length; k++) {
      const a = at[k], b = at[k + 1], seg = document.createElement("span");
      const piece = cs.slice(a, b).join("");
      seg.dataset.o = a;
      seg.className = "dj-seg" + (spans.some((s) => s[0] <= a && b <= s[1]) ? " dj-mark" : "");
      seg.textContent = piece === "\\r" ? (cs[b] === "\\n" ? "" : "\\n") : piece;
      box.appendChild(seg);
    }
    const shown = q.querySelector(".dj-spanchosen");
    const quoted = (s) => "\\u201c" + cs.slice(s[0], s[1]).join("") + "\\u201d";
    if (shown) shown.textContent = spans.length ? spans.map(quoted).join(" · ") : "none";
  };
  const offsetAt = (box, node, off) => {
    if (node.nodeType === Node.TEXT_NODE) {
      return Number(node.parentElement.dataset.o) + Array.from(node.textContent.slice(0, off)).length;
    }
    if (node === box) {
      const child = box.childNodes[off];
      return child ? Number(child.dataset.o) : Array.from(JSON.parse(box.closest(".dj-iq").dataset.text)).length;
    }
    const o = Number(node.dataset.o);
    return off > 0 ? o + Array.from(node.textContent).length : o;
  };
  const words = (cs) => {
    const out = []; let s = -1;
    cs.forEach((c, i) => {
      const blank = /\\s/.test(c);
      if (!blank && s < 0) s = i;
      if (blank && s >= 0) { out.push([s, i]); s = -1; }
    });
    if (s >= 0) out.push([s, cs.length]);
    return out;
  };
  const trimmed = (cs, a, b) => {
    while (a < b && /\\s/.test(cs[a])) a++;
    while (b > a && /\\s/.test(cs[b - 1])) b--;
    return [a, b];
  };
  // Keys of a focused span question: → / ← move the end of its last span a word, Shift+→ / Shift+← its
  // start; + starts a new span at the next word (spans); Backspace drops the last span; N answers none.
  const spanKey = (e, q) => {
    const cs = chars(q), ws = words(cs), spans = spansOf(q), many = q.dataset.kind === "spans";
    const last = spans[spans.length - 1];
    if (e.key === "n" || e.key === "N") { setSpans(q, []); return true; }
    if (e.key === "Backspace" || e.key === "Delete") { setSpans(q, spans.slice(0, -1)); return true; }
    if (e.key === "+" && many) {
      const next = ws.find((w) => !last || w[0] >= last[1]);
      if (next) setSpans(q, [...spans, next]);
      return true;
    }
    if (e.key !== "ArrowRight" && e.key !== "ArrowLeft") return false;
    if (!last) { if (ws.length) setSpans(q, [ws[0]]); return true; }
    const floor = spans.length > 1 ? spans[spans.length - 2][1] : 0;
    let [a, b] = last;
    if (e.shiftKey && e.key === "ArrowRight") { const w = ws.find((w) => w[0] > a && w[0] < b); if (w) a = w[0]; }
    else if (e.shiftKey) { const w = ws.filter((w) => w[0] < a && w[0] >= floor).pop(); if (w) a = w[0]; }
    else if (e.key === "ArrowRight") { const w = ws.find((w) => w[1] > b); if (w) b = w[1]; }
    else { const w = ws.filter((w) => w[1] < b && w[1] > a).pop(); if (w) b = w[1]; }
    setSpans(q, [...spans.slice(0, -1), [a, b]]);
    return true;
  };
  // A selection made in a span question's text is its answer (span) or one more of its answers (spans);
  // a click on a marked span of a spans question drops it.
  document.addEventListener("mouseup", (e) => {
    const box = e.target.closest && e.target.closest("#itemview .dj-spantext");
    if (!box) return;
    const v = view(); if (!v) return;
    const q = box.closest(".dj-iq"), sel = window.getSelection();
    focusAt(v, questions(v).indexOf(q));
    const spans = spansOf(q), many = q.dataset.kind === "spans";
    if (!sel || sel.rangeCount === 0 || sel.isCollapsed) {
      const mark = e.target.closest(".dj-mark");
      if (mark && many) {
        const o = Number(mark.dataset.o);
        setSpans(q, spans.filter((s) => !(s[0] <= o && o < s[1])));
      }
      return;
    }
    const r = sel.getRangeAt(0);
    if (!box.contains(r.startContainer) || !box.contains(r.endContainer)) return;
    const start = offsetAt(box, r.startContainer, r.startOffset), end = offsetAt(box, r.endContainer, r.endOffset);
    const [a, b] = trimmed(chars(q), start, end);
    sel.removeAllRanges();
    if (b <= a) return;
    setSpans(q, many ? [...spans.filter((s) => s[1] <= a || s[0] >= b), [a, b]] : [[a, b]]);
  });
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
    if (e.key === "Enter" && t.closest && t.closest("button")) return;  // Enter presses the focused button
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const qs = questions(v);
    if (e.key === "u" || e.key === "U") { e.preventDefault(); send(v, "item-undo"); return; }
    if (!qs.length) return;
    const i = focused(v), q = qs[i];
    if (q.classList.contains("dj-spanq") && !(e.key === "Tab") && spanKey(e, q)) { e.preventDefault(); return; }
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
    guess = annotate.guess_notice(entry.suggestion)
    if guess:  # its bars are a guess: said whatever answer is picked (a pick removes only .dj-missing)
        missing += f"<div class='dj-guess'>{html.escape(guess.strip())}</div>"
    focus = " dj-focus" if index == 0 and entry.applies else ""
    off, staged = staged_attributes(entry)
    return (
        f"<div class='dj-iq{focus}{off}' data-q='{html.escape(entry.question.id)}'{chosen_attr}{staged}>"
        f"{annotate.instructions_html(entry.question.instructions)}{missing}{''.join(rows)}</div>"
    )


def staged_attributes(entry: annotation.Entry) -> tuple[str, str]:
    """A staged question's class (hidden while it does not apply) and its condition, for the page to show
    or hide it as the answers above it change."""
    staged = ""
    if entry.question.ask_if:
        condition = json.dumps({other: list(wanted) for other, wanted in entry.question.ask_if})
        staged = f" data-ask-if='{html.escape(condition)}'"
    return ("" if entry.applies else " dj-off"), staged


SPAN_HELP = (
    "Select words with the mouse, or: → / ← move the end of the span a word, Shift+→ / Shift+← its start, "
    "N answers none, Backspace drops the last span"
)


def span_question_html(index: int, entry: annotation.Entry, text: str) -> str:
    """A span question: its instructions, the item text with the chosen spans (the annotator's own, else the
    model's) marked, the model's spans with their confidence, and the keys. The text rides along as JSON
    (data-text) so the page can count code points exactly; everything shown is escaped."""
    kind = entry.question.kind
    chosen = entry.preselected
    chosen_attr = "" if chosen is None else f" data-chosen='{html.escape(chosen)}'"
    missing = "" if chosen is not None else "<div class='dj-missing'>No suggestion: select the answer.</div>"
    keys = SPAN_HELP + ("; + starts another span at the next word" if kind == "spans" else "") + "."
    focus = " dj-focus" if index == 0 and entry.applies else ""
    off, staged = staged_attributes(entry)
    return (
        f"<div class='dj-iq dj-spanq{focus}{off}' data-q='{html.escape(entry.question.id)}' data-kind='{kind}'"
        f"{chosen_attr}{staged} data-text='{html.escape(json.dumps(text))}'>"
        f"{annotate.instructions_html(entry.question.instructions)}{missing}"
        f"<div class='dj-spantext'>{span_segments_html(text, chosen, kind)}</div>"
        f"<div class='dj-spaninfo'>Answer: <span class='dj-spanchosen'>{html.escape(chosen_text(text, chosen, kind))}"
        f"</span></div><div class='dj-spaninfo dj-spanmodel'>{html.escape(span_suggestion_line(entry.suggestion))}"
        f"</div><div class='dj-spaninfo'><small>{html.escape(keys)}</small></div></div>"
    )


# Each question type names its widget (diffjev.question_types); this is how the item view draws each one.
WIDGETS = {
    "options": lambda index, entry, text: question_html(index, entry),
    "span": span_question_html,
    "spans": span_question_html,
}


def item_view_html(card: annotation.ItemCard, image: ImageData | None = None) -> str:
    """The item once (its image, where it has one, beside its text), then every question given to the
    annotator; a staged question whose condition the preselected answers do not meet is there but hidden,
    for the page to show once an answer asks it."""
    shown = [e for e in card.entries if e.applies or (e.given and e.not_asked is not None)]
    first = next((i for i, e in enumerate(shown) if e.applies), 0)
    questions = "".join(
        WIDGETS[entry.question.type.widget](i - first, entry, card.text) for i, entry in enumerate(shown)
    )
    return (
        f"{annotate.item_with_image_html(card, image)}{suggested_by_html(shown)}"
        f"<div class='dj-questions'>{questions}</div>"
    )


def suggested_by_html(entries: list[annotation.Entry]) -> str:
    """One line naming the model (and run) each suggestion on the card came from: the header names the
    studio's engine, and an imported project's suggestions were made by another tool's model. Escaped."""
    runs: dict[int, str] = {}
    for entry in entries:
        if entry.suggestion is not None:
            runs.setdefault(entry.suggestion["run"], entry.suggestion["model"])
    if not runs:
        return ""
    named = ", ".join(f"{html.escape(model)} (run {run})" for run, model in sorted(runs.items()))
    return f"<div class='dj-spaninfo dj-suggested-by'>Suggestions from {named}</div>"


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
    with gr.Row(elem_id="itemview-actions"):
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
        if back is None:  # said beside the progress line, which stays
            card = session.get("card")
            shown = progress_line(studio.db, card, NOTHING_TO_UNDO) if card is not None else NOTHING_TO_UNDO
            return session, shown, gr.update()
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
    # The item, not Start, has the keys then (Enter on a focused Start would press it again), in view
    start.click(start_queue, [queue], outputs, api_name="item_start", **fast).then(
        None,
        None,
        None,
        js="() => { document.activeElement?.blur(); document.querySelector('#itemview .dj-iq')?.scrollIntoView("
        "{block: 'nearest'}); }",
    )
    studio.after_answers(send_accept.click(accept_item, [state, choices], outputs, api_name="item_accept", **fast))
    studio.after_answers(send_skip.click(skip_item, [state], outputs, api_name="item_skip", **fast))
    studio.after_answers(send_undo.click(undo_item, [state], outputs, api_name="item_undo", **fast))
    # The shown buttons send what the page holds, the way the keys do.
    for shown, target in ((accept, "item-accept"), (skip, "item-skip"), (undo, "item-undo")):
        shown.click(None, js=f"() => document.dispatchEvent(new KeyboardEvent('keydown', {{key: '{_KEY[target]}'}}))")


_KEY = {"item-accept": "Enter", "item-skip": "s", "item-undo": "u"}


def import_notice_text(summary: str) -> str:
    """An import's summary (BundleReport.summary: a line of counts, then a "note: ..." line for each thing
    the file held that was not taken) as the Annotate tab shows it, every word of it escaped."""
    counts, *notes = summary.split("\n")
    said = [f"**Imported:** {md_text(counts[:1].upper() + counts[1:])}."]
    return "\n".join(said + [f"- {md_text(note)}" for note in notes])


def build_import_notice(studio: Studio) -> None:
    """What the import that made this project brought in, above the card: the Manage tab's report is gone
    once the page jumps here, so it is said again, to the one who imported, until they dismiss it."""
    with gr.Row(visible=False, elem_id="import-notice-row") as row:
        notice = gr.Markdown(elem_id="import-notice")
        dismiss = gr.Button("Dismiss", size="sm", scale=0, min_width=90, elem_id="import-notice-dismiss")

    def shown(request: gr.Request) -> tuple:
        scope = studio.scope(request)
        said = studio.import_notices.get((scope.user, scope.project))
        return (import_notice_text(said) if said else ""), gr.Row(visible=said is not None)

    def dismissed(request: gr.Request) -> tuple:
        scope = studio.scope(request)
        studio.import_notices.pop((scope.user, scope.project), None)
        return "", gr.Row(visible=False)

    # On the page's load, like studio.on_load, but named, so a client can read it as the page does.
    gr.on(None, quiet_without_project(shown, [notice, row]), [], [notice, row], api_name="import_notice")
    dismiss.click(dismissed, [], [notice, row], api_name="dismiss_import_notice", queue=False)


def build_tab(studio: Studio) -> None:
    """The Annotate tab: a switch between the item view and the one-question view, set when the page
    loads by the size of the project's schema."""
    build_import_notice(studio)
    mode = gr.Radio([WHOLE_ITEM, ONE_QUESTION], value=WHOLE_ITEM, label="View", elem_id="annotate-mode")
    data.build_prelabel_line(studio)
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
