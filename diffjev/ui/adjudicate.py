"""The Adjudicate tab (a project's reviewers and admins only): the items where annotators disagree (and,
ticked, any answered item), one at a time, with every annotator's answer, the seconds each spent and the
model's distribution; the reviewer picks one of the given answers or writes another, with an optional
comment, and the next disagreement follows."""

from __future__ import annotations

from typing import Any

import gradio as gr
import pandas as pd

from diffjev.services import adjudication
from storage import repo
from diffjev.ui.context import Studio, md_text, refusal
from diffjev.ui.data import LATEST, LATEST_LABEL, picked_run, run_choices

DOING = "Adjudication"
HIDDEN = "hidden"  # kept in the page, out of sight (see review.HIDDEN)
NOTHING_OPEN = (
    "*No open disagreement: every item the annotators answered differently is settled. Tick **Any answered "
    "item** to settle an agreed one, or **Settled ones too** to revise a settled one.*"
)
NOTHING_AT_ALL = "*No item has an answer yet: answers given on the Annotate tab come here when annotators differ.*"


def no_disagreement(answered: int) -> str:
    """What the tab says where items have answers and no two annotators gave one item different answers
    (one annotator so far, or all agreeing)."""
    items = f"{answered:,} answer{'s' if answered != 1 else ''}"
    return (
        f"*No disagreement: {items} given, and no two annotators answered an item differently. Tick **Any "
        "answered item** to review the answered items and settle one; the Review tab compares them with the "
        "model.*"
    )


def card_markdown(case: adjudication.Case) -> str:
    """The case as the reviewer reads it; every text from anyone (item, annotator names, comment) shown
    literally."""
    text = "  \n".join(md_text(line) for line in case.text.splitlines()) or "*(empty text)*"
    lines = [
        f"**Item {md_text(case.item)}** · question **{md_text(case.question)}**",
        "",
        text,
        "",
        "| annotator | answer | source | seconds |",
        "|---|---|---|---|",
    ]
    for a in case.answers:
        seconds = f"{a.seconds:.1f}" if a.seconds is not None else "–"
        lines.append(f"| {md_text(a.annotator)} | {md_text(case.shown(a.value))} | {md_text(a.source)} | {seconds} |")
    lines.append("")
    if case.distribution:
        shown = " · ".join(
            f"{md_text(name)} {p:.2f}" for name, p in sorted(case.distribution.items(), key=lambda kv: -kv[1])
        )
        lines.append(f"**Model** (run {case.run_id}): {shown}")
    elif case.model_answer is not None:  # a span answer: no distribution over names, the words it read
        lines.append(f"**Model** (run {case.run_id}): {md_text(case.shown(case.model_answer))}")
    else:
        lines.append("**Model**: no read of this item and question in the chosen run.")
    if case.settled is not None:
        s = case.settled
        comment = f": “{md_text(s.comment)}”" if s.comment else ""
        settled = md_text(case.shown(s.value))
        lines += ["", f"**Settled** as **{settled}** by {md_text(s.reviewer)}{comment} (revision {s.revision})"]
    return "\n".join(lines)


def build(studio: Studio, opened: gr.Tab | None = None) -> None:
    """The tab's parts; `opened`, the tab itself: shown to reviewers and admins only, refreshed when opened."""
    gr.Markdown(
        "**Adjudicate**: settle the items where annotators disagree. The final answer is stored as its own "
        "source (*adjudicated*), is the label exports mark, and is the human truth calibration uses; every "
        "annotator's own answer is kept beside it."
    )
    with gr.Row():
        run_pick = gr.Dropdown(
            [(LATEST_LABEL, LATEST)], value=LATEST, label="Model's distribution from", elem_id="adjudicate-run"
        )
        any_answered = gr.Checkbox(False, label="Any answered item", elem_id="adjudicate-any")
        settled_too = gr.Checkbox(False, label="Settled ones too", elem_id="adjudicate-settled")
        refresh = gr.Button("Refresh", elem_id="adjudicate-refresh")
    heading = gr.Markdown(elem_id="adjudicate-heading")
    card = gr.Markdown(elem_id="adjudicate-card")
    with gr.Row():
        item = gr.Textbox(label="Item", interactive=False, elem_id="adjudicate-item")
        question = gr.Textbox(label="Question", interactive=False, elem_id="adjudicate-question")
    # A dropdown that takes any value: its choices are the shown case's, while an API client names the answer
    # itself; the service checks it against the question's answers either way.
    pick = gr.Dropdown(
        [], label="Final answer: one the annotators gave", allow_custom_value=True, elem_id="adjudicate-pick"
    )
    other = gr.Textbox(label="…or write another of the question's answers", elem_id="adjudicate-other")
    comment = gr.Textbox(label="Comment (optional)", lines=2, elem_id="adjudicate-comment")
    settle = gr.Button("Settle and go to the next", variant="primary", elem_id="adjudicate-save")
    note = gr.Markdown(elem_id="adjudicate-note")
    listing = gr.Dataframe(label="Cases", interactive=False, visible=HIDDEN, elem_id="adjudicate-cases")
    shown = [heading, card, item, question, pick, other, comment, listing]

    def reviewer(request: gr.Request):
        scope = studio.scope(request)
        scope.require_reviewer(DOING)
        return scope

    def show(run_value: Any, every: bool, settled: bool, request: gr.Request) -> tuple:
        return listed(reviewer(request), run_value, every, settled)

    def listed(scope, run_value: Any, every: bool, settled: bool, after: tuple[str, str] | None = None) -> tuple:
        try:
            found = adjudication.cases(
                studio.db, scope.project, any_answered=bool(every), settled_too=bool(settled), run=picked_run(run_value)
            )
            counts = adjudication.progress(studio.db, scope.project)
        except repo.NotFound as exc:  # the picked run was deleted meanwhile
            raise refusal(exc) from None
        return case_outputs(found, counts, after)

    def save(
        shown_item: str, key: str, picked: str | None, written: str, why: str, run_value: Any, every: bool,
        settled: bool, request: gr.Request,
    ) -> tuple:  # fmt: skip
        scope = reviewer(request)
        if not str(shown_item or "").strip() or not key:
            return ("⚠️ No case is shown: press Refresh.", *listed(scope, run_value, every, settled))
        value = str(written or "").strip() or picked
        try:
            done = adjudication.adjudicate(studio.db, scope.project, shown_item, key, value, scope.user, why or "")
        except (ValueError, repo.NotFound) as exc:  # an answer the question lacks, an item not in the project
            return (f"⚠️ {md_text(str(exc))}", *[gr.update() for _ in shown])
        said = f"Item {md_text(shown_item)}, {md_text(key)}: settled as **{md_text(done.value)}**."
        return (said, *listed(scope, run_value, every, settled, after=(shown_item, key)))

    def on_load(request: gr.Request) -> tuple:
        """Fill the tab for a reviewer; the studio hides it from anyone else (its events refuse them anyway)."""
        scope = studio.scope(request)
        if not scope.may_review():
            return (gr.update(), *[gr.update() for _ in shown])
        choices = gr.update(choices=run_choices(studio, scope), value=LATEST)
        return (choices, *show(LATEST, False, False, request))

    inputs = [run_pick, any_answered, settled_too]
    refresh.click(show, inputs, shown, api_name="adjudicate_cases")
    for box in (any_answered, settled_too):
        box.change(show, inputs, shown, api_visibility="private", show_progress="hidden")
    run_pick.change(show, inputs, shown, api_visibility="private", show_progress="hidden")
    settle.click(save, [item, question, pick, other, comment, *inputs], [note, *shown], api_name="adjudicate")
    if opened is not None:
        studio.on_load.append((on_load, [], [run_pick, *shown]))
        opened.select(show, inputs, shown, api_visibility="private", show_progress="hidden")


def case_outputs(found: list[adjudication.Case], counts: dict[str, int], after: tuple[str, str] | None = None) -> tuple:
    """The first case on the card (with `after`, the one after that case where it is still listed, as when
    settled ones are listed too), its answers to pick from, and the list of every case shown."""
    more = "+" if counts["open"] >= adjudication.OPEN_COUNTED else ""
    heading = f"**{counts['open']}{more}** open disagreements · **{counts['settled']}** settled"
    table = gr.update(value=pd.DataFrame([adjudication.describe(c) for c in found]), visible=True)
    if not found:
        if counts["open"] or counts["settled"]:
            why = NOTHING_OPEN
        else:
            why = no_disagreement(counts["answered"]) if counts.get("answered") else NOTHING_AT_ALL
        empty = gr.update(choices=[], value=None)
        return heading, why, "", "", empty, "", "", gr.update(value=None, visible=HIDDEN)
    case = found[0]
    place = next((n for n, c in enumerate(found) if (c.item, c.question) == after), None)
    if place is not None:
        case = found[(place + 1) % len(found)]
    given = case.given()
    value = case.settled.value if case.settled and case.settled.value in given else None
    comment = (case.settled.comment or "") if case.settled else ""
    return (
        heading,
        card_markdown(case),
        case.item,
        case.question,
        gr.update(choices=[(case.shown(v), v) for v in given], value=value),  # span answers by their words
        "",
        comment,
        table,
    )
