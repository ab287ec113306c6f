"""Many projects in one studio: the picker in the header, and the Manage tab: a new project (questions
from a form or pasted JSON, a live preview, then the new project's Import tab; or, whole, from a Label
Studio export or an Argilla dataset), members and reviewers, assignments, archive and delete.

A project is opened by the page's address (`?project=NAME`): picking one navigates there, so a link opens
it and a reload keeps it. Every handler resolves the scope from the request first; nothing here takes a
project name from an input to decide who may do what.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr

from diffjev.engines.base import EngineError
from diffjev.errors import SchemaError
from diffjev.services import projects
from diffjev.services.projects import FORM_COLUMNS, ProjectInputError
from diffjev.io import SourceError
from diffjev.services.interchange_uploads import TOOL_NAMES, Upload, create_project_from_upload
from diffjev.ui.access import NotAnUpload, uploaded_file
from diffjev.ui.context import Studio, md_text, refusal
from diffjev.ui.project import canvas_preview


def open_project_js(tab: str | None = None, project_kept: bool = True, unless_open: bool = False) -> str:
    """A page script that navigates once its event gave a name: to that project (or, `project_kept` False,
    to the user's default project, after this one was deleted), on `tab` where named. The page's address
    names the project, so a link opens it and a reload keeps it; the page opens on the tab it names.
    `unless_open`: not when the name is the project the page has open (the picker's input event fires
    again when focus leaves it)."""
    project = "url.searchParams.set('project', name);" if project_kept else "url.searchParams.delete('project');"
    set_tab = f"url.searchParams.set('tab', {json.dumps(tab)});" if tab else "url.searchParams.delete('tab');"
    stay = "if (url.searchParams.get('project') === name) return; " if unless_open else ""
    return (
        "(name) => { if (!name) return; const url = new URL(window.location.href); "
        f"{stay}{project} {set_tab} window.location.assign(url.toString()); }}"
    )


NAME_THE_PROJECT_JS = """(name) => {
  const url = new URL(window.location.href);
  if (!name || url.searchParams.get('project') === name) return;
  url.searchParams.set('project', name);
  window.history.replaceState(null, '', url.toString());
}"""
EMPTY_FORM = [["", "yes_no", "", ""]]
TABS = ("annotate", "project", "import", "items", "prelabel", "review", "adjudicate", "export", "try", "projects")
# The tabs of those who run a project: not on an annotator's page.
REVIEWERS_TABS = ("import", "prelabel", "review", "adjudicate", "export", "projects")


def build_picker(studio: Studio) -> None:
    """The header's project picker: the projects the signed-in user may open, each with its item count,
    answered share and last activity; admins may list the archived ones too."""
    with gr.Row():
        picker = gr.Dropdown(label="Project", choices=[], elem_id="project-picker", scale=4, interactive=True)
        show_archived = gr.Checkbox(label="Show archived", visible=False, elem_id="project-show-archived", scale=1)

    def fill(include_archived: bool, request: gr.Request) -> tuple[Any, Any]:
        scope = studio.scope(request)
        admin = studio.is_admin(scope.user)
        listed = projects.project_list(studio.db, scope.user, admin, include_archived=admin and include_archived)
        choices = [(summary.label(), summary.name) for summary in listed]
        if scope.project not in {summary.name for summary in listed}:  # an archived one opened by its address
            choices.append((f"{scope.project} (archived)", scope.project))
        return gr.Dropdown(choices=choices, value=scope.project), gr.Checkbox(visible=admin)

    studio.on_load.append((fill, [show_archived], [picker, show_archived]))
    studio.on_items_changed.append((fill, [show_archived], [picker, show_archived]))  # the item counts
    studio.on_answers_changed.append((fill, [show_archived], [picker, show_archived]))  # the share answered
    show_archived.input(fill, [show_archived], [picker, show_archived], api_visibility="private")
    picker.input(None, [picker], None, js=open_project_js(unless_open=True))
    # The project a page opened without naming one goes into its address, so the address is a link to it.
    picker.change(None, [picker], None, js=NAME_THE_PROJECT_JS)


def opening_tab(studio: Studio) -> Callable[[gr.Request], Any]:
    """The page-load handler that opens the tab the address names (`&tab=import` after a new project is
    created), else the first; an annotator's page never opens one of the tabs it leaves out."""

    def opened(request: gr.Request) -> Any:
        wanted = request.query_params.get("tab") if request is not None else None
        if wanted not in TABS or (wanted in REVIEWERS_TABS and not studio.scope(request).may_review()):
            return gr.Tabs()
        return gr.Tabs(selected=wanted)

    return opened


def build(studio: Studio) -> None:
    """The Manage tab."""
    with gr.Accordion("New project", open=True, elem_id="new-project"):
        _build_new_project(studio)
        _build_from_tool(studio)
    with gr.Accordion("Members and reviewers", open=False, elem_id="project-roles"):
        _build_roles(studio)
    with gr.Accordion("Assignments", open=False, elem_id="project-assignments"):
        _build_assignments(studio)
    with gr.Accordion("Archive or delete this project", open=False, elem_id="project-archive"):
        _build_archive(studio)


def _build_new_project(studio: Studio) -> None:
    gr.Markdown(
        "Admins only. Build the questions in the form (one row per question: its `id`, its `type`: yes_no, "
        "choice or score, its instructions, and for choice or score the options or levels, one per line or "
        "separated by `;`, each `name` or `name: description`), or paste a schema as JSON. **Create** opens "
        "the new project's Import tab."
    )
    with gr.Column():  # one column: beside a preview the questions grid had half the width and scrolled
        with gr.Column():
            name = gr.Textbox(label="Name", elem_id="new-project-name")
            text_field = gr.Textbox(
                "text",
                label="Text column (the column of your files that holds each item's text)",
                elem_id="new-project-text",
            )
            instructions = gr.Textbox(label="Instructions", lines=2, elem_id="new-project-instructions")
            source = gr.Radio(["Form", "JSON"], value="Form", label="Questions from", elem_id="new-project-source")
            form = gr.Dataframe(
                value=EMPTY_FORM,
                headers=list(FORM_COLUMNS),
                datatype="str",
                column_count=len(FORM_COLUMNS),
                interactive=True,
                label="Questions",
                elem_id="new-project-form",
            )
            with gr.Row():
                add = gr.Button("Add question", size="sm", elem_id="new-project-add")
                remove = gr.Button("Remove last question", size="sm", elem_id="new-project-remove")
            schema_json = gr.Code(language="json", label="Schema JSON", visible=False, elem_id="new-project-json")
            template = gr.Textbox(label="Response template (optional)", lines=2, elem_id="new-project-template")
            error = gr.Markdown(elem_id="new-project-error")
            create = gr.Button("Create", variant="primary", elem_id="new-project-create")
            created = gr.Textbox(visible=False, elem_id="new-project-created")
        with gr.Column():
            preview = gr.HTML(elem_id="new-project-preview")

    def rows_of(table: Any) -> list[list[Any]]:
        return table.values.tolist() if hasattr(table, "values") else list(table or [])

    def parsed(source_: str, instructions_: str, table: Any, text: str, template_: str):
        if source_ == "JSON":
            return projects.schema_from_json(text, instructions_, template_)
        return projects.schema_from_form(instructions_, rows_of(table), template_)

    def show(source_: str, instructions_: str, table: Any, text: str, template_: str) -> tuple[str, str]:
        if source_ == "JSON" and not (text or "").strip():  # nothing pasted yet: nothing to warn of
            return "", ""
        try:
            return "", canvas_preview(studio.preview_builder(), parsed(source_, instructions_, table, text, template_))
        except (ProjectInputError, SchemaError, EngineError) as exc:  # EngineError: the model is still loading
            return f"⚠️ {md_text(exc)}", ""

    def store(
        name_: str,
        text_field_: str,
        source_: str,
        instructions_: str,
        table: Any,
        text: str,
        template_: str,
        request: gr.Request,
    ):
        # Not through a project's scope: an admin makes the first project where there is none to open.
        user, admin = studio.acting(request)
        if not admin:
            raise refusal(f"Creating a project is for the studio's admins (DIFFJEV_ADMINS); {user} is not one")
        try:
            schema = parsed(source_, instructions_, table, text, template_)
            studio.preview_builder().check(schema)  # refuse a template the model cannot read
            made = projects.create_project(studio.db, name_, schema, user, text_field=text_field_)
        except (ProjectInputError, SchemaError, EngineError) as exc:
            return f"⚠️ {md_text(exc)}", ""
        studio.import_notices.pop((user, made), None)  # one about an earlier project of that name
        return f"Created **{md_text(made)}**; opening its Import tab …", made

    inputs = [source, instructions, form, schema_json, template]
    for component in (instructions, form, schema_json, template):
        component.change(show, inputs, [error, preview], api_visibility="private")

    def switched(source_: str, table: Any, text: str) -> tuple:
        """Form or JSON shown; to JSON with nothing pasted yet, the form's rows (else an example) fill it."""
        to_json = source_ == "JSON"
        fill = to_json and not (text or "").strip()
        code = (
            gr.update(visible=True, value=projects.form_as_json(rows_of(table))) if fill else gr.update(visible=to_json)
        )
        return (
            gr.Dataframe(visible=not to_json),
            code,
            *[gr.Button(visible=not to_json)] * 2,
        )

    source.change(
        switched, [source, form, schema_json], [form, schema_json, add, remove], api_visibility="private"
    ).then(show, inputs, [error, preview], api_visibility="private")
    add.click(lambda t: rows_of(t) + [["", "yes_no", "", ""]], [form], [form], api_visibility="private")
    remove.click(lambda t: rows_of(t)[:-1] or EMPTY_FORM, [form], [form], api_visibility="private")
    create.click(store, [name, text_field, *inputs], [error, created], api_name="create_project").then(
        None, [created], None, js=open_project_js(tab="import")
    )


def _build_from_tool(studio: Studio) -> None:
    gr.Markdown(
        "### From Label Studio or Argilla\n"
        "Admins only. **Label Studio**: upload the project's JSON export (Export > JSON) and its labeling config "
        "(Settings > Labeling Interface > Code, saved as .xml), or the .zip diffjev's Export tab gives for "
        "Label Studio, which holds both. **Argilla**: upload the folder `Dataset.to_disk` "
        "wrote, as a .zip. The questions, the items, every annotator's answers and the predictions or suggestions "
        "(as runs, with their scores) come along; a file diffjev cannot hold whole stores nothing and says why."
    )
    with gr.Row():
        tool = gr.Radio(
            [(label, value) for value, label in TOOL_NAMES.items()],
            value="labelstudio",
            label="From",
            elem_id="tool-import-format",
        )
        name = gr.Textbox(label="Name of the new project", elem_id="tool-import-name")
    with gr.Row():
        upload = gr.File(
            label="Label Studio JSON export, or an Argilla dataset (.zip)",
            file_types=[".json", ".zip"],
            elem_id="tool-import-file",
        )
        config = gr.File(label="Label Studio labeling config (.xml)", file_types=[".xml"], elem_id="tool-import-config")
    create = gr.Button("Create from these files", variant="primary", elem_id="tool-import-create")
    report = gr.Markdown(elem_id="tool-import-report")
    created = gr.Textbox(visible=False, elem_id="tool-import-created")

    def received(value: Any) -> Upload | None:
        if not value:
            return None
        try:
            path = uploaded_file(value)
        except NotAnUpload as exc:
            raise refusal(exc) from None
        return Upload(path, Path(path).name)  # Gradio keeps an upload under the name it was sent with

    def store(fmt: str, source: Any, config_file: Any, name_: str, request: gr.Request) -> tuple[str, str]:
        # The same check as Create above: making a project is an admin's, whatever it is made from.
        user, admin = studio.acting(request)
        if not admin:
            raise refusal(f"Creating a project is for the studio's admins (DIFFJEV_ADMINS); {user} is not one")
        upload_ = received(source)
        if upload_ is None:
            return "⚠️ Upload the Label Studio JSON export or the Argilla dataset's .zip first.", ""
        try:
            report_ = create_project_from_upload(studio.db, name_, fmt, upload_, received(config_file), user)
        except (ProjectInputError, SourceError) as exc:
            return f"⚠️ Nothing created: {md_text(exc)}", ""
        said = report_.summary()
        studio.import_notices[(user, report_.project)] = said  # said again where the page lands
        return f"{md_text(said[:1].upper() + said[1:])}; opening it …", report_.project

    create.click(store, [tool, upload, config, name], [report, created], api_name="create_project_from_tool").then(
        None, [created], None, js=open_project_js(tab="annotate")
    )


def _build_roles(studio: Studio) -> None:
    gr.Markdown(
        "Admins only. **Members** may open this project (names separated by commas; empty: every user who "
        "can sign in). **Reviewers** may also adjudicate, assign work and change the schema."
    )
    members = gr.Textbox(label="Members", elem_id="roles-members")
    reviewers = gr.Textbox(
        label="Reviewers (among the members; empty: every member runs the project)", elem_id="roles-reviewers"
    )
    note = gr.Markdown(elem_id="roles-note")
    save = gr.Button("Save members and reviewers", elem_id="roles-save")

    def current(request: gr.Request) -> tuple[str, str]:
        scope = studio.scope(request)
        if not scope.may_review():  # an annotator's page holds none of it
            return "", ""
        stored_members, stored_reviewers, _ = projects.roles_of(studio.db, scope.project)
        return ", ".join(stored_members or []), ", ".join(stored_reviewers or [])

    def store(members_: str, reviewers_: str, request: gr.Request) -> tuple[str, str, str]:
        scope = studio.scope(request)
        scope.require_admin("Setting a project's members and reviewers")
        try:
            stored_members, stored_reviewers = projects.set_roles(
                studio.db, scope.project, members_, reviewers_, scope.user
            )
        except ValueError as exc:  # repo.Conflict: a list with no names
            return members_, reviewers_, f"⚠️ {md_text(exc)}"
        who = ", ".join(stored_members) if stored_members else "every user who can sign in"
        runs = (
            f"reviewers: {md_text(', '.join(stored_reviewers))}; the other members answer only"
            if stored_reviewers
            else "no reviewers named, so **every member runs this project** (imports, exports, changes the "
            "schema); name reviewers to leave the others answering only"
        )
        return (
            ", ".join(stored_members or []),
            ", ".join(stored_reviewers or []),
            f"Saved. Members: {md_text(who)}; {runs}.",
        )

    studio.on_load.append((current, [], [members, reviewers]))
    save.click(store, [members, reviewers], [members, reviewers, note], api_name="set_roles")


def _build_assignments(studio: Studio) -> None:
    gr.Markdown(
        "Reviewers and admins. Give a question or a share of the items to named annotators, as a JSON list: "
        '`[{"annotator": "bob", "questions": ["urgent"], "share": [0, 50]}]`. `questions`: the question ids, '
        "or null for all; `share`: `[from, to]`, the items whose id modulo 100 falls in it, or null for all. "
        "An annotator with assignments sees only what they were given; one without any sees everything. "
        "Empty: no assignments."
    )
    box = gr.Code(language="json", label="Assignments", elem_id="assignments-json")
    note = gr.Markdown(elem_id="assignments-note")
    save = gr.Button("Save assignments", elem_id="assignments-save")

    def current(request: gr.Request) -> str:
        scope = studio.scope(request)
        if not scope.may_review():  # an annotator's page holds none of it
            return ""
        stored = projects.roles_of(studio.db, scope.project)[2]
        return json.dumps(stored, indent=2) if stored else ""

    def store(text: str, request: gr.Request) -> tuple[str, str]:
        scope = studio.scope(request)
        scope.require_reviewer("Assigning work")
        try:
            stored = projects.set_assignments(studio.db, scope.project, text, scope.user)
        except ProjectInputError as exc:
            return text, f"⚠️ {md_text(exc)}"
        count = len(stored or [])
        return json.dumps(stored, indent=2) if stored else "", f"Saved {count} assignment(s)."

    studio.on_load.append((current, [], [box]))
    save.click(store, [box], [box, note], api_name="set_assignments")


def _build_archive(studio: Studio) -> None:
    gr.Markdown(
        "Admins only. An archived project leaves the picker and annotators can no longer open it; nothing in it "
        "is removed. **Delete** removes the project and everything in it for good: type its name to confirm. "
        "The audit log keeps who archived or deleted what."
    )
    with gr.Row():
        archive = gr.Button("Archive", elem_id="project-archive-button")
        unarchive = gr.Button("Unarchive", elem_id="project-unarchive-button")
    typed = gr.Textbox(label="Type the project's name to delete it", elem_id="project-delete-name")
    delete = gr.Button("Delete project", variant="stop", elem_id="project-delete-button")
    note = gr.Markdown(elem_id="project-archive-note")
    deleted = gr.Textbox(visible=False, elem_id="project-deleted")

    def set_archived(archived: bool, request: gr.Request) -> str:
        scope = studio.scope(request)
        scope.require_admin("Archiving a project")
        projects.set_archived(studio.db, scope.project, archived, scope.user)
        return f"**{md_text(scope.project)}** is {'archived' if archived else 'back in the picker'}."

    def remove(typed_name: str, request: gr.Request) -> tuple[str, str]:
        scope = studio.scope(request)
        scope.require_admin("Deleting a project")
        try:
            counts = projects.delete_project(studio.db, scope.project, typed_name, scope.user)
        except ProjectInputError as exc:
            return f"⚠️ {md_text(exc)}", ""
        for key in [key for key in studio.import_notices if key[1] == scope.project]:
            del studio.import_notices[key]  # a project made again under this name came from elsewhere
        return (
            f"Deleted **{md_text(scope.project)}**: {counts['items']} items, {counts['responses']} answers, "
            f"{counts['runs']} runs.",
            scope.project,
        )

    def archive_project(request: gr.Request) -> str:
        return set_archived(True, request)

    def unarchive_project(request: gr.Request) -> str:
        return set_archived(False, request)

    archive.click(archive_project, [], [note], api_name="archive_project")
    unarchive.click(unarchive_project, [], [note], api_name="unarchive_project")
    delete.click(remove, [typed], [note, deleted], api_name="delete_project").then(
        None, [deleted], None, js=open_project_js(project_kept=False)
    )
