"""The Items tab: search the project's items page by page, open one, and delete the ones that do not belong."""

from __future__ import annotations

from typing import Any

import gradio as gr
import orjson
import pandas as pd

from diffjev.services.items import FILTERS, PAGE_SIZE, DeleteRefused, ItemsPage, browse, delete_items, open_item
from storage import repo
from diffjev.ui.context import Studio, md_text

COLUMNS = ["number", "id", "text", "answers"]


def page_outputs(found: ItemsPage) -> tuple:
    """The table, its summary line, and the page's items to select from."""
    rows = [[r.id, r.external_id or "", r.text, r.answers] for r in found.rows]
    choices = [(f"{r.id} · {r.external_id or '–'} · {r.text[:40]}", str(r.id)) for r in found.rows]
    return (
        pd.DataFrame(rows, columns=COLUMNS),
        found.summary(),
        gr.update(choices=choices, value=[]),
    )


def item_markdown(item: dict[str, Any]) -> str:
    """An item as the page shows it: everything from a file or an annotator escaped, never rendered."""
    ident = f"**{md_text(item['id'])}** · " if item["id"] else ""
    lines = [f"{ident}number {item['number']}", "", md_text(item["text"]), "", "**Fields**"]
    lines += [f"- {md_text(k)}: {md_text(_cell(v))}" for k, v in item["fields"].items()] or ["- none"]
    if item["hidden"]:
        names = ", ".join(md_text(k) for k in item["hidden"])
        lines.append(f"- hidden from annotators (kept in exports): {names}")
    lines += ["", "**Answers**"]
    lines += [
        f"- {md_text(a['question'])}: {md_text(a['answer'] if a['answer'] is not None else '(none)')} "
        f"({md_text(a['status'])}, {md_text(a['source'])}) by {md_text(a['annotator'])}"
        for a in item["answers"]
    ] or ["- no answer yet"]
    lines += ["", "**Suggestions**"]
    lines += [
        f"- run {s['run']} ({md_text(s['model'])}), {md_text(s['question'])}: {md_text(s['suggestion'])} "
        f"(confidence {s['confidence']:.3f})"
        for s in item["suggestions"]
    ] or ["- no pre-label yet"]
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return orjson.dumps(value).decode()
    return "" if value is None else str(value)


def build(studio: Studio) -> None:
    with gr.Row():
        search = gr.Textbox(label="Search the text (or an item's id)", elem_id="items-search")
        which = gr.Radio(list(FILTERS), value="All", label="Items", elem_id="items-filter")
        page = gr.Number(1, precision=0, minimum=1, label=f"Page ({PAGE_SIZE} items each)", elem_id="items-page")
    show = gr.Button("Show", elem_id="items-show")
    summary = gr.Markdown(elem_id="items-summary")
    table = gr.Dataframe(headers=COLUMNS, interactive=False, elem_id="items-table")
    with gr.Accordion("Open an item", open=True):
        with gr.Row():
            key = gr.Textbox(label="The item's id, or its number in the table", elem_id="items-key")
            open_button = gr.Button("Open", elem_id="items-open")
        shown = gr.Markdown(elem_id="items-item")
    with gr.Accordion("Delete items", open=True):
        selected = gr.CheckboxGroup([], label="Items on this page", elem_id="items-select")
        with gr.Row():
            confirm = gr.Checkbox(False, label="Yes, delete the selected items", elem_id="items-confirm")
            with_answers = gr.Checkbox(
                False, label="Also delete answered items, with their answers", elem_id="items-with-answers"
            )
        delete = gr.Button("Delete selected", variant="stop", elem_id="items-delete")
        deleted = gr.Markdown(elem_id="items-delete-note")

    def page_of(project: str, text: str, chosen: str, number: float | None) -> tuple:
        return page_outputs(browse(studio.db, project, text or "", chosen, int(number or 1)))

    def refresh(text: str, chosen: str, number: float | None, request: gr.Request) -> tuple:
        return page_of(studio.scope(request).project, text, chosen, number)

    def open_one(wanted: str, request: gr.Request) -> str:
        project = studio.scope(request).project
        try:
            return item_markdown(open_item(studio.db, project, wanted or ""))
        except repo.NotFound as exc:
            return f"⚠️ {md_text(str(exc))}"

    def delete_chosen(
        numbers: list[str],
        sure: bool,
        answered_too: bool,
        text: str,
        chosen: str,
        number: float | None,
        request: gr.Request,
    ) -> tuple:
        scope = studio.scope(request)
        scope.require_reviewer("Deleting items")
        try:
            count = delete_items(
                studio.db,
                scope.project,
                [int(n) for n in numbers or [] if str(n).isdigit()],
                scope.user,
                confirmed=bool(sure),
                with_answers=bool(answered_too),
            )
        except DeleteRefused as exc:
            return (f"⚠️ {md_text(str(exc))}", gr.update(), gr.update(), gr.update(), gr.update(), gr.update())
        return (f"Deleted {count} items.", *page_of(scope.project, text, chosen, number), False, False)

    page_inputs = [search, which, page]
    show.click(refresh, page_inputs, [table, summary, selected], api_name="items_browse")
    search.submit(refresh, page_inputs, [table, summary, selected], api_visibility="private")
    open_button.click(open_one, [key], [shown], api_name="items_open")
    key.submit(open_one, [key], [shown], api_visibility="private")
    delete.click(
        delete_chosen,
        [selected, confirm, with_answers, *page_inputs],
        [deleted, table, summary, selected, confirm, with_answers],
        api_name="items_delete",
    )

    def first_page(request: gr.Request) -> tuple:
        return refresh("", "All", 1, request)

    studio.on_load.append((first_page, [], [table, summary, selected]))
