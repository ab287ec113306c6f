"""The Import, Pre-label and Export tabs: thin handlers over the services."""

from __future__ import annotations

import html
import threading
import time
from pathlib import Path
from typing import Any

import gradio as gr
import orjson
import pandas as pd

from diffjev.engines.auto import ENGINE_CHOICES, choose_engine
from diffjev.engines.base import EngineError
from diffjev.io import ExportError, Peek, SourceError, peek
from diffjev.models import ModelLoadError
from diffjev.services.engine_access import studio_engine_choice
from diffjev.services.exporting import download_of, export_project, images_folder
from diffjev.services.interchange_uploads import TOOL_NAMES, export_for_tool
from diffjev.schema import SchemaError
from diffjev.services import prelabel as runs
from diffjev.services.importing import (
    UndoRefused,
    dataset_source,
    import_items,
    project_id_field,
    project_text_field,
    recent_imports,
    undo_import,
)
from diffjev.services.prelabel import background_line, prelabel
from storage import repo
from diffjev.ui.access import NotAnUpload, uploaded_file
from diffjev.ui.context import Scope, Studio, md_text, quiet_without_project, refusal


def _source(studio: Studio, upload: Any, dataset_name: str) -> Any:
    if upload:
        try:
            return uploaded_file(upload)
        except NotAnUpload as exc:
            raise refusal(exc) from None
    if dataset_name.strip():
        try:
            return dataset_source(dataset_name, studio.import_dir)
        except SourceError as exc:
            raise refusal(exc) from None
    raise gr.Error("Upload a CSV, JSONL or Parquet file, or give a Hugging Face dataset name.")


PREVIEW_CELL_CHARS = 300  # a 10 MB value sent whole made the page 21.5 MB; its start tells what the column holds


def preview_cell(value: Any) -> str:
    shown = _cell_text(value)
    if len(shown) > PREVIEW_CELL_CHARS:
        return f"{shown[:PREVIEW_CELL_CHARS]}… ({len(shown):,} characters)"
    return shown


def _cell_text(value: Any) -> str:
    if value is None or isinstance(value, str):
        return value or ""
    try:
        if isinstance(value, (dict, list)):
            try:
                return orjson.dumps(value).decode()
            except TypeError:  # an integer past 64 bits inside an object, say: Python's own text
                pass
        return str(value)
    except ValueError:  # an integer past the 4,300 digits Python prints
        return f"({type(value).__name__} too large to show)"


# Columns that name an item rather than say something about it: preselected as the id, never as context.
ID_COLUMNS = ("id", "external_id", "uid", "uuid", "guid", "key", "item_id", "doc_id", "_id")


def id_like(column: str) -> bool:
    return column.lower() in ID_COLUMNS


def mean_text_length(rows: list[dict[str, Any]], column: str) -> float | None:
    """The average length of a column's text values among the first rows; None where none is text."""
    texts = [r[column] for r in rows if isinstance(r.get(column), str)]
    return sum(map(len, texts)) / len(texts) if texts else None


def guess_columns(
    columns: list[str], rows: list[dict[str, Any]], project_text: str, project_id: str | None = None
) -> tuple[str, str | None]:
    """The text column and an id-like column, if any. The text is the project's own field where the file has
    it, else the column holding the longest text on average among those that do not name the item. The id is
    the project's own id field where the file has it (an export read back), else the first of ID_COLUMNS
    the file has: `external_id` before diffjev's own `item_id`."""
    if project_text in columns:
        text = project_text
    else:
        lengths = {c: mean_text_length(rows, c) for c in columns if not id_like(c)}
        texts = [c for c, length in lengths.items() if length is not None]
        text = max(texts, key=lambda c: lengths[c]) if texts else next(iter(lengths), columns[0])
    if project_id in columns and project_id != text:
        return text, project_id
    ranked = sorted((c for c in columns if id_like(c) and c != text), key=lambda c: ID_COLUMNS.index(c.lower()))
    return text, next(iter(ranked), None)


EXPORT_OWN = ("item_id", "external_id", "fields", "run_id", "engine", "model", "image")


def exported_columns(columns: list[str]) -> set[str]:
    """The columns a diffjev export adds (its ids, the run, and each question's answer, suggestion and their
    details), where the file is one (it has item_id, run_id, engine and model); else none. Read back, they are
    labels and suggestions, not context."""
    if not {"item_id", "run_id", "engine", "model"} <= set(columns):
        return set()
    questions = [c for c in columns if f"{c}_model" in columns and f"{c}_confidence" in columns]
    return {c for c in columns if c in EXPORT_OWN or any(c == q or c.startswith(f"{q}_") for q in questions)}


def context_choices(
    columns: list[str], text: str | None, ident: str | None, ticked: list[str] | None, image: str | None = None
) -> Any:
    """The context columns to offer: every column but the text, the id and the image, which an item holds
    already."""
    offered = [c for c in columns if c not in (text, ident, image)]
    kept = offered if ticked is None else [c for c in ticked if c in offered]
    return gr.update(choices=offered, value=kept)


def confirm_update(text: str | None, project_text: str) -> Any:
    """The tick that confirms reading the text from a column that is not the project's text field."""
    differs = bool(text) and text != project_text
    label = f"The text is in column '{text}', not the project's field '{project_text}': import it from '{text}'"
    return gr.update(visible=differs, value=False, label=label if differs else "")


def readable(name: str) -> str:
    """A column name as the page can show it: bytes that are not UTF-8 as the replacement character."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def preview_note(found: Peek, unreadable: list[str]) -> str:
    lines = []
    if found.rejects:
        lines.append(
            f"**{len(found.rejects)} bad row(s)** among the first lines, left out of the preview; "
            f"the import rejects them too:"
        )
        lines += [f"- line {r.line}: {md_text(r.reason)}" for r in found.rejects[:20]]
    if exported_columns(found.columns):
        lines.append(
            "This file is a diffjev export: its own columns (item_id, the run, each question's answers and "
            "suggestions) are not ticked as context, and its `fields` column holds the items' context as JSON."
        )
    if unreadable:
        lines.append(
            f"Column name(s) {md_text(', '.join(unreadable))} hold bytes that are not UTF-8 and cannot be chosen; "
            f"save the file as UTF-8 to use them."
        )
    if not found.rows:
        lines.append("No good row among the first lines.")
    return "\n".join(lines)


def import_choices(studio: Studio, scope: Scope) -> Any:
    imports = recent_imports(studio.db, scope.project)
    choices = [
        (
            f"#{i.id} · {i.source} · {i.items} items · text from '{i.text_field}' · by {i.actor}, "
            f"{i.created_at:%Y-%m-%d %H:%M}",
            str(i.id),
        )
        for i in imports
    ]
    return gr.update(choices=choices, value=choices[0][1] if choices else None)


def build_import(studio: Studio) -> None:
    with gr.Row():
        upload = gr.File(
            label="CSV, JSONL or Parquet", file_types=[".csv", ".jsonl", ".json", ".parquet"], elem_id="import-file"
        )
        dataset = gr.Textbox(
            label="…or a Hugging Face dataset (a Hub name, or a save_to_disk folder in the import folder)",
            elem_id="import-hf",
        )
    look = gr.Button("Preview", elem_id="import-preview")
    api_preview = gr.Button(visible=False)  # the API's preview: one that refuses with an error
    preview = gr.Dataframe(label="First rows", interactive=False, elem_id="import-table")
    note = gr.Markdown(elem_id="import-preview-note")
    # What the preview found beyond its table: the columns that may be chosen, and the note on bad rows.
    found_state = gr.State({"usable": [], "note": ""})
    with gr.Row():
        text_column = gr.Dropdown([], label="Text column", elem_id="import-text")
        id_column = gr.Dropdown([], label="Id column (optional)", elem_id="import-id")
        context = gr.CheckboxGroup([], label="Context columns", elem_id="import-context")
        # Paths in it are read from the import folder only; bytes and a dataset's Image feature as they are.
        image_column = gr.Dropdown(
            [], value=None, label="Image column (optional)", allow_custom_value=True, elem_id="import-image"
        )
    confirm = gr.Checkbox(False, visible=False, elem_id="import-confirm")
    go = gr.Button("Import", variant="primary", elem_id="import-go")
    report = gr.Markdown(elem_id="import-report")
    gr.Markdown("### Undo an import\nRemoves the items an import created, if none of them is answered yet.")
    with gr.Row():
        # Any import number is taken (undo_import looks it up in this project): the list is only a guide.
        which_import = gr.Dropdown([], label="Import", allow_custom_value=True, elem_id="import-undo-which")
        undo = gr.Button("Undo this import", elem_id="import-undo")
    undo_note = gr.Markdown(elem_id="import-undo-note")

    def imports_listed(request: gr.Request) -> Any:
        scope = studio.scope(request)
        return import_choices(studio, scope) if scope.may_review() else gr.update(choices=[], value=None)

    studio.on_load.append((imports_listed, [], [which_import]))

    def preview_of(upload: Any, dataset_name: str, request: gr.Request) -> tuple:
        """The preview's table, pickers and state; a file or name that cannot be previewed raises gr.Error."""
        scope = studio.scope(request)
        scope.require_reviewer("Importing items")
        try:
            found = peek(_source(studio, upload, dataset_name))
        except SourceError as exc:
            raise refusal(exc) from None
        names = [readable(c) for c in found.columns]
        usable = [c for c, shown in zip(found.columns, names) if c == shown]
        if not usable:
            raise refusal("no column name of this file is UTF-8 text; save the file as UTF-8")
        project_text = project_text_field(studio.db, scope.project)
        text, ident = guess_columns(usable, found.rows, project_text, project_id_field(studio.db, scope.project))
        # The preview shows each cell as text: a file's values (an integer past 64 bits, a nested object)
        # are anything JSON allows, and the page's own encoder would refuse some of them.
        shown = [[preview_cell(r.get(c)) for c in found.columns] for r in found.rows]
        return (
            pd.DataFrame(shown, columns=names),
            gr.update(choices=usable, value=text),
            gr.update(choices=[""] + usable, value=ident or ""),
            context_choices(usable, text, ident, [c for c in usable if c not in exported_columns(usable)]),
            {"usable": usable, "note": preview_note(found, [n for n in names if n not in usable])},
        )

    def preview_on_page(upload: Any, dataset_name: str, request: gr.Request) -> tuple:
        """The page's preview: a file that cannot be previewed empties the table and the pickers and says why
        in the preview's note, so nothing of the previous file stays on screen; the last report goes too."""
        try:
            return (*preview_of(upload, dataset_name, request), "")
        except gr.Error as exc:  # escaped for a toast: unescaped, then escaped for the Markdown note
            nothing = {"usable": [], "note": f"⚠️ {md_text(html.unescape(exc.message))}"}
            cleared = gr.update(choices=[], value=None)
            return pd.DataFrame(), cleared, cleared, gr.update(choices=[], value=[]), nothing, ""

    def after_preview(found: dict, text: str, request: gr.Request) -> tuple:
        confirm = confirm_update(text, project_text_field(studio.db, studio.scope(request).project))
        return found["note"], confirm, gr.update(choices=[""] + found["usable"], value="")

    def columns_chosen(found: dict, text: str, ident: str, image: str | None, request: gr.Request) -> tuple:
        # Every other column is offered and ticked again: the ticks are not an input, since a quick second
        # pick would send ticks the first pick's answer has already taken out of the choices.
        return context_choices(found["usable"], text, ident or None, None, image or None), confirm_update(
            text, project_text_field(studio.db, studio.scope(request).project)
        )

    def run(
        upload: Any,
        dataset_name: str,
        text: str,
        ident: str,
        context_columns: list[str],
        confirmed: bool | None = None,
        image: str | None = None,
        request: gr.Request = None,
    ) -> str:
        scope = studio.scope(request)
        scope.require_reviewer("Importing items")
        project_text = project_text_field(studio.db, scope.project)
        if text and text != project_text and not confirmed:
            return (
                f"⚠️ Nothing imported: the text would come from column **{md_text(text)}**, not the project's "
                f"text field **{md_text(project_text)}**. If that column does hold the text, tick the box above "
                f"and press Import again; otherwise choose the file that has a **{md_text(project_text)}** column."
            )
        try:
            result = import_items(
                studio.db,
                scope.project,
                _source(studio, upload, dataset_name),
                text_field=text or None,
                id_field=ident or None,
                context_fields=[c for c in context_columns if c != image],
                actor=scope.user,
                image_field=image or None,
                image_folder=studio.import_dir,
            )
        except SourceError as exc:
            return f"⚠️ {md_text(str(exc))}"
        lines = [f"**Imported {result.imported}**, duplicates {result.duplicates}, rejected {result.rejected}."]
        if result.imported:
            lines[0] += f" Import #{result.import_id} can be undone below while none of its items is answered."
        lines += [f"- line {r.line}: {md_text(r.reason)}" for r in result.rejects[:50]]
        if result.rejected > 50:
            lines.append(f"- … and {result.rejected - 50} more")
        return "\n".join(lines)

    def undo_chosen(chosen: str | None, request: gr.Request) -> tuple[str, Any]:
        scope = studio.scope(request)
        scope.require_reviewer("Undoing an import")
        if not chosen or not str(chosen).isdigit():
            return "⚠️ Choose an import to undo.", import_choices(studio, scope)
        try:
            removed = undo_import(studio.db, scope.project, int(chosen), scope.user)
        except UndoRefused as exc:
            return f"⚠️ {md_text(str(exc))}", import_choices(studio, scope)
        return f"Import #{int(chosen)} undone: {removed} items removed.", import_choices(studio, scope)

    # The API's answers keep their shape: the note, the tick and the list of imports follow as events of their own.
    # The API's preview refuses what it cannot read, as an error; the page's says so in its note instead.
    previewed = [preview, text_column, id_column, context, found_state]
    api_preview.click(preview_of, [upload, dataset], previewed, api_name="import_preview")
    look.click(preview_on_page, [upload, dataset], [*previewed, report], api_visibility="private").then(
        after_preview, [found_state, text_column], [note, confirm, image_column], api_visibility="private"
    )
    for chooser in (text_column, id_column, image_column):
        chooser.input(
            columns_chosen,
            [found_state, text_column, id_column, image_column],
            [context, confirm],
            api_visibility="private",
        )
    imported = go.click(
        run,
        [upload, dataset, text_column, id_column, context, confirm, image_column],
        [report],
        api_name="import_items",
    ).then(imports_listed, [], [which_import], api_visibility="private")
    undone = undo.click(undo_chosen, [which_import], [undo_note, which_import], api_name="import_undo")
    for handler, inputs, outputs in studio.on_items_changed:
        for event in (imported, undone):
            refresh = quiet_without_project(handler, outputs)
            event.then(refresh, inputs, outputs, api_visibility="private", show_progress="hidden")


CONFIGURED = "the studio's engine"
LATEST = "latest"
LATEST_LABEL = "Latest reads per item"


def run_choices(studio: Studio, scope: Scope) -> list[tuple[str, str]]:
    """The run dropdowns' choices: each item's latest read (the default), then every run, newest first."""
    rows = runs.run_table(studio.db, scope.project)
    return [(LATEST_LABEL, LATEST)] + [(f"Run {r[0]} · {r[1]} {r[2]} · {r[3]}", str(r[0])) for r in rows]


def picked_run(value: Any) -> int | None:
    """A run dropdown's value: None for each item's latest read, else the run's number."""
    if value in (None, "", LATEST, LATEST_LABEL):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise refusal(f"run {value!r} is not a run number; choose a run from the list") from None


def keep_pick(studio: Studio, tab: str, component: Any) -> None:
    """Remember the run a page picks in a tab (see Studio.picked_runs)."""

    def keep(value: Any, request: gr.Request) -> None:
        studio.picked_runs[(request.session_hash or "", tab)] = picked_run(value)

    component.change(keep, [component], [], api_visibility="private", queue=False, show_progress="hidden")


def pick_of(studio: Studio, tab: str, request: gr.Request | None) -> int | None:
    return studio.picked_runs.get((getattr(request, "session_hash", None) or "", tab))


RESUMABLE = ("interrupted", "cancelled", "failed")  # runs that stopped part way, which Resume continues


def delete_tick_label(run_id: int | None) -> str:
    run = f"run {run_id}" if run_id is not None else "the chosen run"
    return f"Yes, delete {run} and its suggestions; answers stay"


def runs_frame(studio: Studio, scope: Scope) -> pd.DataFrame:
    return pd.DataFrame(runs.run_table(studio.db, scope.project), columns=runs.RUN_COLUMNS)


def engine_sentence(studio: Studio) -> str:
    """The Pre-label tab's line on the studio's engine, as it stands now."""
    slot = studio.slot
    if slot.chosen is not None:
        # A description may end a sentence of its own (the fallback's does): one full stop, not two.
        engine = f"The studio's engine: **{md_text(slot.chosen.description.rstrip('.'))}**."
    elif slot.error is not None:
        engine = f"The studio has no engine: {md_text(slot.error.rstrip('.'))}. Choose another below."
    else:
        engine = "The studio's engine: the model is still loading; pre-labels can start when it is ready."
    return f"{engine} Another engine can make a run too, to compare them in Review."


def build_prelabel_line(studio: Studio, elem_id: str = "annotate-prelabel") -> None:
    """A pre-label run going in the background (this tab's, another tab's, another page's, the demo's): its
    count, refreshed every two seconds, above the card in either view of the Annotate tab, and on the
    Pre-label tab, where a page opened or reloaded while a run reads would otherwise show no progress."""
    prelabeling = gr.Markdown(elem_id=elem_id)
    ticker = gr.Timer(2.0)

    def prelabel_line(request: gr.Request) -> str:
        return background_line(studio.scope(request).project)

    studio.on_load.append((prelabel_line, [], [prelabeling]))
    ticker.tick(
        quiet_without_project(prelabel_line, [prelabeling]),
        [],
        [prelabeling],
        api_visibility="private",
        show_progress="hidden",
    )


def build_prelabel(studio: Studio) -> None:
    # Filled when the page loads and as the ticker ticks: the model may still be loading when the page opens.
    engine_line = gr.Markdown(engine_sentence(studio), elem_id="prelabel-studio-engine")
    with gr.Row():
        kind = gr.Dropdown(
            [CONFIGURED, *[k for k in ENGINE_CHOICES if k != "auto"]],
            value=CONFIGURED,
            label="Engine",
            elem_id="prelabel-engine",
        )
        url = gr.Textbox(
            label="Server URL (vllm, jev): the studio's own or one in DIFFJEV_ENGINE_URLS", elem_id="prelabel-url"
        )
        model = gr.Textbox(
            label="Model (served name, Hub name, or a folder in DIFFJEV_MODEL_DIR)", elem_id="prelabel-model"
        )
    which = gr.Radio(
        ["All items", "Only items nobody has answered"], value="All items", label="Items", elem_id="prelabel-which"
    )
    with gr.Row():
        start = gr.Button("Start pre-labeling", variant="primary", elem_id="prelabel-start")
        stop = gr.Button("Cancel", elem_id="prelabel-cancel")
    report = gr.Markdown(elem_id="prelabel-report")
    build_prelabel_line(studio, elem_id="prelabel-live")
    failures = gr.Dataframe(headers=["item", "external id", "error"], interactive=False, elem_id="prelabel-failures")
    gr.Markdown(
        "**Runs** (newest first). Delete a run with its suggestions (answers stay), or resume one "
        "that stopped with the engine chosen above."
    )
    run_list = gr.Dataframe(headers=runs.RUN_COLUMNS, interactive=False, elem_id="prelabel-runs")
    with gr.Row():
        chosen_run = gr.Dropdown([], label="Run", allow_custom_value=True, elem_id="prelabel-run")
        delete = gr.Button("Delete run", variant="stop", elem_id="prelabel-delete")
        resume = gr.Button("Resume run", elem_id="prelabel-resume")
    # A deleted run's suggestions are gone for good: the deletion waits for this tick, as the Items tab's does.
    delete_sure = gr.Checkbox(False, label=delete_tick_label(None), elem_id="prelabel-delete-confirm")
    # The list refreshes while the tab is open, so a run going in the background shows its count.
    ticker = gr.Timer(3.0)

    def engine_for(kind_name: str, server: str, model_name: str) -> Any:
        if kind_name == CONFIGURED:
            return studio.engine()  # a page error while the model is still loading
        try:  # the server makes the requests and loads the model: only what the operator allowed
            choice = studio_engine_choice(
                kind_name,
                server.strip(),
                model_name.strip(),
                allowed_urls=studio.engine_urls,
                model_dir=studio.model_dir,
            )
            return choose_engine(choice).engine
        except (EngineError, ModelLoadError) as exc:
            raise refusal(exc) from None

    def run(
        kind_name: str,
        server: str,
        model_name: str,
        which_items: str,
        request: gr.Request,
        progress=gr.Progress(),
        run_id: int | None = None,
    ) -> tuple[str, Any]:
        scope = studio.scope(request)
        scope.require_reviewer("Pre-labeling")
        engine = engine_for(kind_name, server, model_name)
        earlier = studio.cancels.get(scope.project)
        cancel = studio.cancels[scope.project] = threading.Event()

        def show(p) -> None:
            progress((p.done, p.total), desc=p.line())

        try:
            result = prelabel(
                studio.db,
                scope.project,
                engine,
                run_id=run_id,
                only_unlabeled=which_items.startswith("Only"),
                actor=scope.user,
                progress=show,
                cancel=cancel,
            )
        except (SchemaError, repo.Conflict, repo.NotFound) as exc:  # refused: no run was made
            if studio.cancels.get(scope.project) is cancel and earlier is not None:
                studio.cancels[scope.project] = earlier  # Cancel still reaches the run that is reading
            raise refusal(exc) from None
        finally:
            if kind_name != CONFIGURED:  # made for this run: release its connections
                engine.close()
        text = (
            f"Run {result.run_id} **{result.status}**: {result.read} items read, {result.failed} failed, "
            f"{result.seconds:.1f} s." + (f" {md_text(result.error)}" if result.error else "")
        )
        return text, pd.DataFrame(result.failures, columns=["item", "external id", "error"])

    def cancel_run(request: gr.Request) -> str:
        scope = studio.scope(request)
        scope.require_reviewer("Cancelling a run")
        event = studio.cancels.get(scope.project)
        if event is None:
            return "No run is going."
        event.set()
        return "Cancelling after the current batch…"

    def resume_run(
        kind_name: str,
        server: str,
        model_name: str,
        which_items: str,
        value: Any,
        request: gr.Request,
        progress=gr.Progress(),
    ) -> tuple[str, Any]:
        run_id = picked_run(value)
        if run_id is None:
            raise gr.Error("Choose a run to resume.")
        return run(kind_name, server, model_name, which_items, request, progress, run_id=run_id)

    def delete_run(value: Any, sure: bool, request: gr.Request) -> tuple[str, Any, Any]:
        run_id = picked_run(value)
        if run_id is None:
            raise gr.Error("Choose a run to delete.")
        scope = studio.scope(request)
        scope.require_reviewer("Deleting a run")
        if not sure:
            return f"⚠️ Nothing deleted: tick “{delete_tick_label(run_id)}” first.", gr.update(), gr.update()
        try:
            text = runs.delete_run(studio.db, scope.project, run_id, scope.user)
        except (repo.Conflict, repo.NotFound) as exc:
            raise refusal(exc) from None
        return text, runs_frame(studio, scope), False

    def listed(request: gr.Request) -> tuple[Any, Any]:
        scope = studio.scope(request)
        return runs_frame(studio, scope), gr.update(choices=[c for c in run_choices(studio, scope) if c[1] != LATEST])

    def listed_on_load(request: gr.Request) -> tuple[Any, Any]:
        """The runs, with the newest that stopped part way chosen: the one a fresh page would resume."""
        scope = studio.scope(request)
        table = runs_frame(studio, scope)
        stopped = table[table["status"].isin(RESUMABLE)]["run"]  # newest first
        choices = [c for c in run_choices(studio, scope) if c[1] != LATEST]
        return table, gr.update(choices=choices, value=str(stopped.iloc[0]) if len(stopped) else None)

    def runs_now(request: gr.Request) -> pd.DataFrame:
        return runs_frame(studio, studio.scope(request))

    studio.on_load.append((listed_on_load, [], [run_list, chosen_run]))
    ticker.tick(
        quiet_without_project(runs_now, [run_list]), [], [run_list], api_visibility="private", show_progress="hidden"
    )
    ticker.tick(lambda: engine_sentence(studio), [], [engine_line], api_visibility="private", show_progress="hidden")
    studio.on_load.append((lambda: engine_sentence(studio), [], [engine_line]))
    start.click(run, [kind, url, model, which], [report, failures], api_name="prelabel").then(
        listed, [], [run_list, chosen_run], api_visibility="private"
    )
    stop.click(cancel_run, [], [report], api_name="prelabel_cancel", queue=False)
    resume.click(
        resume_run, [kind, url, model, which, chosen_run], [report, failures], api_name="prelabel_resume"
    ).then(listed, [], [run_list, chosen_run], api_visibility="private")
    delete.click(delete_run, [chosen_run, delete_sure], [report, run_list, delete_sure], api_name="run_delete").then(
        listed, [], [run_list, chosen_run], api_visibility="private"
    )
    chosen_run.change(
        lambda value: gr.update(value=False, label=delete_tick_label(picked_run(value))),
        [chosen_run],
        [delete_sure],
        api_visibility="private",
        show_progress="hidden",
    )


def export_note(count: int, target: Path, download: Path) -> str:
    """What the page says of a written export: how many items, and, for a file zipped with its images,
    that the download holds both and that they belong side by side."""
    note = f"Exported {count} items."
    if target.is_file() and download != target:
        note += (
            f" The download is one .zip holding {md_text(target.name)} and its {md_text(images_folder(target).name)}/"
            " folder, whose files the `image` column names by relative path: unzip it and keep the two side by side."
        )
    return note


# Label and value: the value is what the API takes and what the CLI's --format names.
EXPORT_CHOICES = [
    ("jsonl", "jsonl"),
    ("csv", "csv"),
    ("parquet", "parquet"),
    ("hf", "hf"),
    ("Label Studio JSON", "labelstudio"),
    ("Argilla dataset", "argilla"),
]


def export_for_another_tool(
    studio: Studio, scope: Scope, fmt_name: str, reviewed_only: bool, who: str, stamp: str, request: gr.Request
) -> tuple[str, Any]:
    """A Label Studio or Argilla export: one .zip holding what that tool imports, with every annotator's
    answers and the suggestions of the chosen run (each item's latest read: every run, each as its own
    model version or agent)."""
    tool = TOOL_NAMES[fmt_name]
    if (who or "").strip():
        return (
            f"⚠️ Nothing exported: a {tool} export carries every annotator's answers, each under their name; "
            "clear “Only this annotator” (it is for diffjev's own formats).",
            gr.update(visible=False),
        )
    folder = studio.export_target(f"{scope.project}-{stamp}").parent
    try:
        count, archive = export_for_tool(
            studio.db,
            scope.project,
            fmt_name,
            folder,
            f"{scope.project}-{stamp}",
            scope.user,
            run_id=pick_of(studio, "export", request),
            reviewed_only=reviewed_only,
        )
    except (SourceError, ExportError, repo.NotFound) as exc:
        return f"⚠️ {md_text(str(exc))}", gr.update(visible=False)
    held = (
        "the tasks JSON and its labeling config (import the JSON in Label Studio and paste the config in "
        "Settings > Labeling Interface)"
        if fmt_name == "labelstudio"
        else "the dataset folder as Argilla's Dataset.to_disk writes it (load it with Dataset.from_disk)"
    )
    note = f"Exported {count} items for {tool}. The download is one .zip holding {held}."
    return note, gr.update(value=studio.offer_download(archive, scope.project), visible=True)


def build_export(studio: Studio) -> None:
    with gr.Row():
        fmt = gr.Dropdown(EXPORT_CHOICES, value="jsonl", label="Format", elem_id="export-format")
        reviewed = gr.Checkbox(True, label="Only items with a human answer", elem_id="export-reviewed")
        annotator = gr.Textbox(label="Only this annotator (optional)", elem_id="export-annotator")
        run_pick = gr.Dropdown([(LATEST_LABEL, LATEST)], value=LATEST, label="Model answers from", elem_id="export-run")
    go = gr.Button("Export", variant="primary", elem_id="export-go")
    note = gr.Markdown(elem_id="export-note")
    download = gr.DownloadButton("Download", visible=False, elem_id="export-download")

    def run(fmt_name: str, reviewed_only: bool, who: str, request: gr.Request) -> tuple[str, Any]:
        scope = studio.scope(request)
        scope.require_reviewer("Exporting")
        stamp = time.strftime("%Y%m%d-%H%M%S")
        if fmt_name in TOOL_NAMES:
            return export_for_another_tool(studio, scope, fmt_name, reviewed_only, who, stamp, request)
        target = studio.export_target(f"{scope.project}-{stamp}.{fmt_name}")
        try:
            count = export_project(
                studio.db,
                scope.project,
                target,
                fmt_name,
                run_id=pick_of(studio, "export", request),
                annotator=(who or "").strip() or None,
                reviewed_only=reviewed_only,
                actor=scope.user,
            )
            download = download_of(target)  # a dataset folder, or a file with its images: one zip
        except (SourceError, ExportError, repo.NotFound) as exc:
            return f"⚠️ {md_text(str(exc))}", gr.update(visible=False)
        shown = studio.offer_download(download, scope.project)
        return export_note(count, target, download), gr.update(value=shown, visible=True)

    def runs_listed(request: gr.Request) -> Any:
        return gr.update(choices=run_choices(studio, studio.scope(request)), value=LATEST)

    studio.on_load.append((runs_listed, [], [run_pick]))
    keep_pick(studio, "export", run_pick)
    go.click(run, [fmt, reviewed, annotator], [note, download], api_name="export")
