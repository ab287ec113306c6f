"""Moving projects in and out of Label Studio and Argilla through the studio's API, as its page does: an
export for either tool downloads as one .zip that imports back with every answer, annotator, distribution,
span and skip; a new project made from a Label Studio export or a zipped Argilla dataset holds what the
command line's import holds; and what may not be done (by whom, with which file) is refused in one line
with nothing stored and no server path said."""

from __future__ import annotations

import contextlib
import html
import json
import tempfile
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from gradio_client import Client, handle_file
from sqlalchemy import func, select

from diffjev.archive import unpack_zip
from diffjev.io import SourceError
from diffjev.services.interchange import import_bundle, import_file, project_bundle, read_file
from interchange_fixtures import comparable, full_project
from storage import repo
from storage.db import Database
from storage.models import Item, Project
from studio_fixtures import serve_studio

DATA = Path(__file__).parent / "data"
LS_EXPORT = DATA / "labelstudio" / "export.json"
LS_CONFIG = DATA / "labelstudio" / "label_config.xml"
ARGILLA = DATA / "argilla" / "support_tickets"
USERS = [("alice", "a-secret"), ("bob", "b-secret"), ("carol", "c-secret")]


@pytest.fixture(scope="module")
def studio(tmp_path_factory, dgemma_engine):
    """alice is the studio's admin, bob a reviewer of tickets, carol annotates it."""
    folder = tmp_path_factory.mktemp("interchange-studio")
    db = full_project(folder / "studio.db", dgemma_engine)
    with db.session() as session:
        repo.set_reviewers(session, "tickets", ["bob"], "owner")
    server, _ = serve_studio(db, dgemma_engine, auth=USERS, admins=frozenset({"alice"}))
    with server:
        yield server, db


def client(server, user) -> Client:
    return Client(server.url, auth=user, verbose=False)


def downloaded(download) -> Path:
    path = download["value"] if isinstance(download, dict) else download  # a component update comes as a dict
    return Path(path["path"] if isinstance(path, dict) else path)


def zip_of(folder: Path, archive: Path) -> Path:
    """A folder zipped as a person zips it: the folder itself at the top, hidden .argilla included."""
    with zipfile.ZipFile(archive, "w") as zipped:
        for path in sorted(folder.rglob("*")):
            zipped.write(path, path.relative_to(folder.parent).as_posix())
    return archive


def project_names(db) -> set[str]:
    with db.read() as session:
        return set(session.scalars(select(Project.name)))


# Export ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["labelstudio", "argilla"])
def test_an_export_for_the_tool_downloads_as_one_zip_that_imports_back_whole(studio, tmp_path, fmt):
    server, db = studio
    note, download = client(server, USERS[1]).predict(fmt, False, "", api_name="/export")
    assert "Exported 3 items" in note and ".zip" in note, note
    archive = downloaded(download)
    assert archive.name.endswith(f".{fmt}.zip")
    unpacked = tmp_path / "unpacked"
    unpacked.mkdir()
    unpack_zip(archive, unpacked)
    if fmt == "labelstudio":
        names = sorted(p.name for p in unpacked.iterdir())
        assert len(names) == 2 and names[0].endswith(".json") and names[1].endswith(".label_config.xml"), names
        source = unpacked / names[0]
    else:
        (source,) = unpacked.iterdir()  # the dataset folder, as Dataset.from_disk takes it
        assert (source / ".argilla" / "settings.json").is_file() and (source / "records.json").is_file()
    back = Database(tmp_path / "back.db")
    import_bundle(back, "back", read_file(fmt, source), "someone")
    assert comparable(project_bundle(back, "back")) == comparable(project_bundle(db, "tickets"))
    # the download itself, as it came, makes a project through the Manage tab
    report, created = client(server, USERS[0]).predict(
        fmt, handle_file(str(archive)), None, f"again-{fmt}", api_name="/create_project_from_tool"
    )
    assert created == f"again-{fmt}", html.unescape(report)
    assert comparable(project_bundle(db, f"again-{fmt}")) == comparable(project_bundle(db, "tickets"))


def test_an_export_for_the_tool_refuses_one_annotators_answers_and_an_annotator(studio):
    server, _ = studio
    note, download = client(server, USERS[1]).predict("labelstudio", False, "alice", api_name="/export")
    assert "Nothing exported" in html.unescape(note) and "Only this annotator" in html.unescape(note)
    assert download.get("visible") is False if isinstance(download, dict) else download is None
    with pytest.raises(Exception, match="Exporting is for the reviewers and admins of tickets; carol annotates"):
        client(server, USERS[2]).predict("argilla", False, "", api_name="/export")


# New project from another tool's files -------------------------------------------------------------------------


def same_as_the_command_lines(db, name: str, fmt: str, source: Path, config: Path | None, tmp_path) -> None:
    """The project the studio made holds what services.interchange.import_file makes of the same files."""
    reference = Database(tmp_path / f"reference-{fmt}.db")
    import_file(reference, "reference", fmt, source, "someone", config=config)
    assert comparable(project_bundle(db, name)) == comparable(project_bundle(reference, "reference"))


def test_a_label_studio_export_and_its_config_make_a_project_with_answers_and_predictions(studio, tmp_path):
    server, db = studio
    report, created = client(server, USERS[0]).predict(
        "labelstudio",
        handle_file(str(LS_EXPORT)),
        handle_file(str(LS_CONFIG)),
        "from-ls",
        api_name="/create_project_from_tool",
    )
    report = html.unescape(report)
    assert created == "from-ls"
    assert "Created project 'from-ls': 3 items" in report and "suggestions in 2 runs" in report, report
    same_as_the_command_lines(db, "from-ls", "labelstudio", LS_EXPORT, LS_CONFIG, tmp_path)
    bundle = project_bundle(db, "from-ls")
    tasks = json.loads(LS_EXPORT.read_text())
    assert {r.external_id for r in bundle.records} == {str(t["id"]) for t in tasks}
    assert "alice@example.com" in {a.annotator for r in bundle.records for a in r.answers}
    versions = {p["model_version"] for t in tasks for p in t.get("predictions", [])}
    assert {run.model for run in bundle.runs.values()} == versions
    # the same name again is refused: this makes projects, it does not add to one
    again, created = client(server, USERS[0]).predict(
        "labelstudio",
        handle_file(str(LS_EXPORT)),
        handle_file(str(LS_CONFIG)),
        "from-ls",
        api_name="/create_project_from_tool",
    )
    assert created == "" and "already exists" in html.unescape(again)
    assert len(project_bundle(db, "from-ls").records) == 3


def test_a_zipped_argilla_dataset_makes_a_project_with_responses_and_suggestions(studio, tmp_path):
    server, db = studio
    archive = zip_of(ARGILLA, tmp_path / "support_tickets.zip")
    report, created = client(server, USERS[0]).predict(
        "argilla", handle_file(str(archive)), None, "from-argilla", api_name="/create_project_from_tool"
    )
    assert created == "from-argilla", report
    assert "Created project 'from-argilla': 3 items" in html.unescape(report)
    same_as_the_command_lines(db, "from-argilla", "argilla", ARGILLA, None, tmp_path)
    records = json.loads((ARGILLA / "records.json").read_text())
    agents = {s["agent"] for r in records for s in (r.get("suggestions") or {}).values() if s.get("agent")}
    assert {run.model for run in project_bundle(db, "from-argilla").runs.values()} == agents


@contextlib.contextmanager
def signed_in(server, user) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, timeout=60) as http:
        assert http.post("/login", data={"username": user[0], "password": user[1]}).status_code == 200
        yield http


def on_page(http: httpx.Client, project: str, api_name: str, *data) -> list:
    """An event as the page of `project` sends it: Gradio's page adds its address's query to each call."""
    started = http.post(f"/gradio_api/call/{api_name}?project={project}", json={"data": list(data)})
    assert started.status_code == 200, started.text
    answer = http.get(f"/gradio_api/call/{api_name}/{started.json()['event_id']}?project={project}").text
    assert "event: complete" in answer, answer
    return json.loads(answer.split("data: ", 1)[1])


def shown_value(value) -> str:
    """A Markdown output as a person reads it (a component update carries its value inside)."""
    return html.unescape(value["value"] if isinstance(value, dict) else value)


def test_the_new_projects_annotate_tab_says_what_came_in_until_its_importer_dismisses_it(studio):
    server, _ = studio
    live = DATA / "labelstudio" / "live"
    report, created = client(server, USERS[0]).predict(
        "labelstudio",
        handle_file(str(live / "ls_export_button.json")),
        handle_file(str(live / "label_config.xml")),
        "from-button",
        api_name="/create_project_from_tool",
    )
    said = html.unescape(report)
    assert created == "from-button" and "predictions were listed by id only" in said, said
    tasks = json.loads((live / "ls_export_button.json").read_text())
    listed = sum(len(task["predictions"]) for task in tasks)
    with signed_in(server, USERS[0]) as alice, signed_in(server, USERS[1]) as bob:
        notice, row = on_page(alice, "from-button", "import_notice")
        notice = shown_value(notice)
        assert row.get("visible") is True
        assert notice.startswith(f"**Imported:** Created project 'from-button': {len(tasks)} items"), notice
        assert "answers, 0 suggestions in 0 runs." in notice, notice
        assert f"\n- note: {listed} predictions were listed by id only" in notice and "only_id false" in notice
        # said to the one who imported, on that project only; the same load a moment later says it again
        assert on_page(alice, "from-button", "import_notice")[0] == on_page(alice, "from-button", "import_notice")[0]
        for http, project in ((bob, "from-button"), (alice, "tickets")):
            notice, row = on_page(http, project, "import_notice")
            assert shown_value(notice) == "" and row.get("visible") is False
        on_page(alice, "from-button", "dismiss_import_notice")
        notice, row = on_page(alice, "from-button", "import_notice")
        assert shown_value(notice) == "" and row.get("visible") is False


def test_the_card_names_the_model_of_the_run_that_made_its_suggestion(studio, tmp_path):
    """An imported project's suggestions are another tool's model's, not the studio engine's: the card says
    whose, escaped, in both views of the Annotate tab."""
    server, _ = studio
    tasks = json.loads(LS_EXPORT.read_text())
    for task in tasks:
        task["annotations"] = []  # every item open, each with the predictions it had
        for prediction in task.get("predictions", []):
            prediction["model_version"] = f"<b>{prediction['model_version']}</b>"
    renamed = tmp_path / "renamed.json"
    renamed.write_text(json.dumps(tasks))
    _, created = client(server, USERS[0]).predict(
        "labelstudio",
        handle_file(str(renamed)),
        handle_file(str(LS_CONFIG)),
        "named",
        api_name="/create_project_from_tool",
    )
    assert created == "named"
    with signed_in(server, USERS[0]) as alice:
        shown = on_page(alice, "named", "annotate_start", "sentiment", "Unlabeled, in order")
        info = shown[6]  # after the session's state
        assert "<b>" not in info and "· from <b>gemma-v" in html.unescape(info), info
        view = on_page(alice, "named", "item_start", "Unlabeled, in order")[2]
        assert "Suggestions from &lt;b&gt;gemma-v" in view and "<b>gemma" not in view, view


def test_the_header_says_which_run_made_the_suggestions_where_it_is_not_the_engines(studio, dgemma_engine):
    from diffjev.engines.auto import ChosenEngine
    from diffjev.services.prelabel import latest_reading_run, prelabel
    from diffjev.ui.context import Studio
    from diffjev.ui.studio import header_text

    server, db = studio
    client(server, USERS[0]).predict(
        "labelstudio",
        handle_file(str(LS_EXPORT)),
        handle_file(str(LS_CONFIG)),
        "headed",
        api_name="/create_project_from_tool",
    )
    here = Studio(db, ChosenEngine(dgemma_engine, "tiny DiffusionGemma"), "tickets")
    latest = latest_reading_run(db, "headed")
    header = html.unescape(header_text(here, "headed", latest))
    assert f"**Suggestions shown from:** run {latest.id}, gemma-v2" in header and "\n" not in header.split("\n", 1)[1]
    prelabel(db, "headed", dgemma_engine)  # the engine's own run is now the latest: nothing more to say
    assert "Suggestions shown" not in header_text(here, "headed", latest_reading_run(db, "headed"))


# Refusals ------------------------------------------------------------------------------------------------------


def test_only_an_admin_makes_a_project_from_files(studio):
    server, db = studio
    for user in USERS[1:]:  # a reviewer of a project is not a studio admin, nor is an annotator
        with pytest.raises(Exception, match=f"Creating a project is for the studio's admins .*; {user[0]} is not one"):
            client(server, user).predict(
                "labelstudio",
                handle_file(str(LS_EXPORT)),
                handle_file(str(LS_CONFIG)),
                f"by-{user[0]}",
                api_name="/create_project_from_tool",
            )
    assert not {"by-bob", "by-carol"} & project_names(db)


def test_a_zip_with_a_member_outside_its_folder_is_refused_and_writes_nothing_outside(studio, tmp_path):
    server, db = studio
    evil = f"evil-{uuid.uuid4().hex}"
    archive = tmp_path / "support_tickets.zip"
    with zipfile.ZipFile(zip_of(ARGILLA, archive), "a") as zipped:
        zipped.writestr(f"../{evil}", "written where it should not be")
    report, created = client(server, USERS[0]).predict(
        "argilla", handle_file(str(archive)), None, "from-evil", api_name="/create_project_from_tool"
    )
    said = html.unescape(report)
    assert created == "" and said.count("\n") == 0, said
    assert f"support_tickets.zip: member '../{evil}': points outside" in said, said
    assert not Path(tempfile.gettempdir(), evil).exists()
    assert "from-evil" not in project_names(db)


def test_a_server_path_instead_of_an_upload_is_refused(studio):
    server, db = studio
    with httpx.Client(base_url=server.url, timeout=60) as http:
        assert http.post("/login", data={"username": "alice", "password": "a-secret"}).status_code == 200
        posed = {"path": str(LS_EXPORT.resolve()), "meta": {"_type": "gradio.FileData"}}
        config = {"path": str(LS_CONFIG.resolve()), "meta": {"_type": "gradio.FileData"}}
        started = http.post(
            "/gradio_api/call/create_project_from_tool",
            json={"data": ["labelstudio", posed, config, "from-a-path"]},
        )
        if started.status_code == 200:
            answer = http.get(f"/gradio_api/call/create_project_from_tool/{started.json()['event_id']}").text
            assert "event: error" in answer, answer
    assert "from-a-path" not in project_names(db)


def test_a_malformed_export_is_named_in_one_line_and_stores_nothing(studio, tmp_path):
    server, db = studio
    tasks = json.loads(LS_EXPORT.read_text())
    tasks[1]["annotations"][0]["result"][0]["value"]["choices"] = ["furious"]  # not an option of sentiment
    spoiled = tmp_path / "spoiled.json"
    spoiled.write_text(json.dumps(tasks))
    with db.read() as session:
        items_before = session.scalar(select(func.count()).select_from(Item))
    report, created = client(server, USERS[0]).predict(
        "labelstudio",
        handle_file(str(spoiled)),
        handle_file(str(LS_CONFIG)),
        "spoiled",
        api_name="/create_project_from_tool",
    )
    said = html.unescape(report)
    assert created == "" and said.count("\n") == 0, said
    assert said.startswith("⚠️ Nothing created: spoiled.json: task 102") and "furious" in said, said
    assert str(tmp_path) not in said and "gradio" not in said  # the upload's name, never where the server keeps it
    not_json = tmp_path / "not-json.json"
    not_json.write_text("[{")
    report, _ = client(server, USERS[0]).predict(
        "labelstudio",
        handle_file(str(not_json)),
        handle_file(str(LS_CONFIG)),
        "spoiled",
        api_name="/create_project_from_tool",
    )
    assert "not-json.json: not JSON" in html.unescape(report)
    missing, _ = client(server, USERS[0]).predict(
        "labelstudio", handle_file(str(LS_EXPORT)), None, "spoiled", api_name="/create_project_from_tool"
    )
    assert "export.json: Label Studio's export does not carry the labeling config; upload it too" in html.unescape(
        missing
    )
    assert "spoiled" not in project_names(db)
    with db.read() as session:
        assert session.scalar(select(func.count()).select_from(Item)) == items_before


def test_a_bad_record_inside_a_zipped_argilla_dataset_is_named_by_the_zip_and_its_member(studio, tmp_path):
    server, db = studio
    folder = tmp_path / "support_tickets"
    folder.mkdir()
    (folder / ".argilla").mkdir()
    for name in (".argilla/settings.json", ".argilla/dataset.json"):
        (folder / name).write_bytes((ARGILLA / name).read_bytes())
    records = json.loads((ARGILLA / "records.json").read_text())
    records[2]["fields"] = {}  # no text
    (folder / "records.json").write_text(json.dumps(records))
    archive = zip_of(folder, tmp_path / "tickets.zip")
    report, created = client(server, USERS[0]).predict(
        "argilla", handle_file(str(archive)), None, "bad-argilla", api_name="/create_project_from_tool"
    )
    said = html.unescape(report)
    assert created == "" and said.count("\n") == 0
    assert said.startswith("⚠️ Nothing created: tickets.zip/support_tickets/records.json: "), said
    assert "bad-argilla" not in project_names(db)


# Unpacking ----------------------------------------------------------------------------------------------------


def a_zip(path: Path, members: dict[str, bytes], links: tuple[str, ...] = ()) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zipped:
        for name, body in members.items():
            zipped.writestr(name, body)
        for name in links:
            info = zipfile.ZipInfo(name)
            info.external_attr = 0o120777 << 16  # a symbolic link, as `zip --symlinks` stores one
            zipped.writestr(info, "/etc")
    return path


@pytest.mark.parametrize(
    "members, links, said",
    [
        ({"/etc/cron.d/x": b"1"}, (), "member '/etc/cron.d/x': an absolute or Windows path"),
        ({"ok/../../x": b"1"}, (), "member 'ok/../../x': points outside"),
        ({"C:/x": b"1"}, (), "member 'C:/x': an absolute or Windows path"),
        ({"ok.json": b"1"}, ("lead",), "member 'lead': a link or special file"),
        ({f"f{i}": b"" for i in range(6)}, (), "6 members, more than the 5"),
        ({"big": b"0" * 5000}, (), "unpacks to more than"),
    ],
)
def test_unpacking_refuses_paths_outside_links_and_too_much_and_leaves_the_folder_empty(tmp_path, members, links, said):
    archive = a_zip(tmp_path / "upload.zip", {"first.json": b"{}", **members} if len(members) < 6 else members, links)
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(SourceError, match="^upload.zip: ") as refused:
        unpack_zip(archive, folder, max_bytes=4096, max_members=5 if len(members) == 6 else 10)
    assert said in str(refused.value)
    assert list(folder.iterdir()) == []


def test_unpacking_a_file_that_is_not_a_zip_says_so(tmp_path):
    archive = tmp_path / "dataset.zip"
    archive.write_bytes(b"PK\x03\x04 not really")
    folder = tmp_path / "out"
    folder.mkdir()
    with pytest.raises(SourceError, match="^dataset.zip: not a readable .zip archive"):
        unpack_zip(archive, folder)
