"""Importing through the studio's API: the columns a preview chooses, the text stored once, a file without
the project's text column imported only when confirmed, an import undone, the Items view, and previews of
bad and binary files that name lines and never a server path."""

import html
import gradio
import pytest
from gradio_client import Client, handle_file
from sqlalchemy import func, select

from diffjev.services.importing import import_items
from storage import repo
from storage.db import Database
from storage.models import Event, Import, Item, Response
from studio_fixtures import serve_studio, studio_db


@pytest.fixture(scope="module")
def studio(tmp_path_factory, dgemma_engine):
    folder = tmp_path_factory.mktemp("import-studio")
    db = studio_db(folder / "import.db", ["The first ticket"])
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        yield server, db


@pytest.fixture
def client(studio):
    return Client(studio[0].url, verbose=False)


def write(path, text: str | bytes):
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


def import_via(client, path, text, ident, context, *confirm):
    """Preview, then import, as the page does: an import may name only the columns its preview offered."""
    client.predict(handle_file(path), "", api_name="/import_preview")
    return client.predict(handle_file(path), "", text, ident, context, *confirm, api_name="/import_items")


def items_where(db, *conditions):
    with db.read() as session:
        return list(session.scalars(select(Item).where(*conditions).order_by(Item.id)))


def update_of(value) -> dict:
    """A component update as an API client receives it: choices as [label, value] pairs."""
    return {"value": value["value"], "choices": [c[1] for c in value.get("choices", [])]}


def test_preview_picks_the_project_text_field_and_the_id_and_never_offers_them_as_context(client, tmp_path):
    path = write(tmp_path / "tickets.csv", "uuid,plan,text,lang\nu1,pro,Site down,en\nu2,free,Refund,fr\n")
    _, text, ident, context = client.predict(handle_file(path), "", api_name="/import_preview")
    assert update_of(text) == {"value": "text", "choices": ["uuid", "plan", "text", "lang"]}
    assert update_of(ident)["value"] == "uuid"
    assert update_of(context) == {"value": ["plan", "lang"], "choices": ["plan", "lang"]}


def test_a_preview_shows_the_start_of_a_long_value_not_all_of_it(client, tmp_path):
    """A 10 MB text was sent whole to the page (21.5 MB of HTML, 10.9 s): the preview shows its start and
    its length; the import still refuses it by its line."""
    path = write(
        tmp_path / "huge.jsonl", '{"id": "h1", "text": "' + "A" * 10_485_760 + '"}\n{"id": "h2", "text": "ok"}\n'
    )
    table, text, _, _ = client.predict(handle_file(path), "", api_name="/import_preview")
    column = table["headers"].index("text")
    huge, small = (row[column] for row in table["data"])
    assert huge.startswith("AAAA") and len(huge) < 1_000 and "10,485,760 characters" in huge
    assert small == "ok" and text["value"] == "text"


def test_preview_without_the_projects_text_field_picks_the_longest_text_and_the_id_column(client, tmp_path):
    body = "id,comment,stars\n1,Arrived broken and support never answered,1\n2,Works fine for my small shop,4\n"
    path = write(tmp_path / "reviews.csv", body)
    _, text, ident, context = client.predict(handle_file(path), "", api_name="/import_preview")
    assert (text["value"], ident["value"]) == ("comment", "id")
    assert update_of(context)["value"] == ["stars"]


def test_an_import_asked_to_keep_the_text_column_as_context_stores_the_text_once(studio, client, tmp_path):
    _, db = studio
    path = write(tmp_path / "twice.csv", "key,text,plan\nk-twice,Text stored once,pro\n")
    with pytest.raises(Exception, match="not in the list of choices"):  # the page never offers it
        import_via(client, path, "text", "key", ["text", "plan"])
    # a caller of the import itself (the CLI, a script) who names it anyway gets the text once
    report = import_items(db, "tickets", path, id_field="key", context_fields=["text", "key", "plan"])
    assert report.imported == 1
    (item,) = items_where(db, Item.external_id == "k-twice")
    assert (item.text, item.fields) == ("Text stored once", {"plan": "pro"})


def test_a_file_without_the_projects_text_column_imports_only_when_confirmed(studio, client, tmp_path):
    _, db = studio
    path = write(tmp_path / "people.csv", "name,age\nalice,31\nbob,42\n")
    _, text, _, _ = client.predict(handle_file(path), "", api_name="/import_preview")
    assert text["value"] == "name"
    refused = html.unescape(client.predict(handle_file(path), "", "name", "", ["age"], False, api_name="/import_items"))
    assert "Nothing imported" in refused and "column **name**, not the project's text field **text**" in refused
    assert "text field" in refused and not items_where(db, Item.text.in_(["alice", "bob"]))
    done = client.predict(handle_file(path), "", "name", "", ["age"], True, api_name="/import_items")
    assert "Imported 2" in done
    assert [i.text for i in items_where(db, Item.text.in_(["alice", "bob"]))] == ["alice", "bob"]


def answer(db, item_id: int, annotator: str = "local") -> None:
    with db.session() as session:
        project = repo.get_project(session, "tickets")
        _, ids = repo.version_schema(repo.latest_version(session, project.id))
        repo.respond(session, repo.ResponseInput(item_id, ids["team"], annotator, "billing", "manual"))


def import_id_of(report: str) -> str:
    return report.split("Import #", 1)[1].split(" ", 1)[0]


def test_an_import_is_undone_only_while_none_of_its_items_is_answered(studio, client, tmp_path):
    _, db = studio
    first = import_via(
        client, write(tmp_path / "a.csv", "id,text\nua1,Undo one\nua2,Undo two\nua3,Undo three\n"), "text", "id", []
    )
    second = import_via(client, write(tmp_path / "b.csv", "id,text\nub1,Keep one\nub2,Keep two\n"), "text", "id", [])
    answer(db, items_where(db, Item.external_id == "ub1")[0].id)
    refused = html.unescape(client.predict(import_id_of(second), api_name="/import_undo")[0])
    assert "1 of its 2 items is answered" in refused and "Nothing was removed" in refused
    assert len(items_where(db, Item.external_id.in_(["ub1", "ub2"]))) == 2
    undone, choices = client.predict(import_id_of(first), api_name="/import_undo")
    assert "3 items removed" in undone
    assert items_where(db, Item.external_id.in_(["ua1", "ua2", "ua3"])) == []
    assert import_id_of(first) not in [c[1] for c in choices["choices"]]  # an undone import is not offered again
    again, _ = client.predict(import_id_of(first), api_name="/import_undo")
    assert "no import" in again
    with db.read() as session:
        kinds = list(session.scalars(select(Event.kind).where(Event.kind == "items.import_undone")))
    assert kinds == ["items.import_undone"]


def test_an_import_that_stored_no_item_is_left_out_of_the_undo_list(studio, client, tmp_path):
    _, db = studio
    path = write(tmp_path / "again.csv", "key,text\nk-again,Imported twice\n")
    first = import_id_of(import_via(client, path, "text", "key", []))
    assert "Imported 0" in import_via(client, path, "text", "key", [])  # the same file again: nothing new
    with db.read() as session:
        second = str(session.scalar(select(func.max(Import.id))))
    _, listed = client.predict("", api_name="/import_undo")
    assert first in update_of(listed)["choices"] and second not in update_of(listed)["choices"]


def test_the_demo_import_is_named_by_its_tickets(tmp_path):
    from diffjev.services.importing import recent_imports
    from diffjev.ui.studio import DEMO_PROJECT, ensure_project

    db = Database(tmp_path / "demo.db")
    ensure_project(db)
    assert [i.source for i in recent_imports(db, DEMO_PROJECT)] == ["the demo's 60 tickets"]


def test_the_items_view_searches_filters_opens_and_deletes_with_confirmation(studio, client, tmp_path):
    _, db = studio
    path = write(tmp_path / "v.csv", "id,text,plan\nv1,Printer jam in room 4,pro\nv2,Printer on fire,free\n")
    import_via(client, path, "text", "id", ["plan"])
    v1, v2 = (items_where(db, Item.external_id == k)[0].id for k in ("v1", "v2"))
    answer(db, v1, "alice")
    table, summary, selectable = client.predict("printer", "All", 1, api_name="/items_browse")
    assert [row[1] for row in table["data"]] == ["v1", "v2"] and summary == "Items 1–2 of 2."
    assert [c[1] for c in selectable["choices"]] == [str(v1), str(v2)]
    table, _, _ = client.predict("printer", "Unanswered", 1, api_name="/items_browse")
    assert [row[1] for row in table["data"]] == ["v2"]
    table, _, _ = client.predict("printer", "Answered", 1, api_name="/items_browse")
    assert [(row[1], row[3]) for row in table["data"]] == [("v1", 1)]
    opened = html.unescape(client.predict("v1", api_name="/items_open"))
    assert "Printer jam in room 4" in opened and "plan: pro" in opened and "billing" in opened and "alice" in opened
    assert "no item" in client.predict("nope", api_name="/items_open")

    def delete(numbers, sure, answered_too):
        return html.unescape(
            client.predict(numbers, sure, answered_too, "printer", "All", 1, api_name="/items_delete")[0]
        )

    client.predict("printer", "All", 1, api_name="/items_browse")  # the page to select from
    assert "Tick 'Yes, delete" in delete([str(v1), str(v2)], False, False)
    said = delete([str(v1), str(v2)], True, False)
    assert "1 of the 2 selected items is answered (1 answer)" in said and "nothing was deleted" in said
    assert len(items_where(db, Item.id.in_([v1, v2]))) == 2
    assert delete([str(v2)], True, False) == "Deleted 1 items."
    assert delete([str(v1)], True, True) == "Deleted 1 items."
    assert items_where(db, Item.id.in_([v1, v2])) == []
    with db.read() as session:
        logged = list(session.scalars(select(Event.payload).where(Event.kind == "items.deleted")))
    assert logged == [{"items": [v2], "answers_deleted": 0}, {"items": [v1], "answers_deleted": 1}]


def test_the_items_view_pages_with_a_limit(studio, client, tmp_path):
    rows = "\n".join(f"pg{i},Paged ticket {i}" for i in range(120))
    import_via(client, write(tmp_path / "p.csv", f"id,text\n{rows}\n"), "text", "id", [])
    table, summary, _ = client.predict("Paged ticket", "All", 3, api_name="/items_browse")
    assert [row[1] for row in table["data"]] == [f"pg{i}" for i in range(100, 120)]
    assert summary == "Items 101–120 of 120."


BAD = {
    "latin1.csv": b"id,text\nl1,good one\nl2,caf\xe9 au lait\nl3,good two\n",
    "random.csv": bytes(range(256)) * 40,
    "random.jsonl": bytes(range(256)) * 40,
    "random.parquet": bytes(range(256)) * 40,
    "notes.txt": b"text\nhello\n",
    "people.csv": b"name,age\nalice,31\n",
}


def test_bad_and_binary_files_are_named_without_a_server_path(studio, client, tmp_path):
    shown = client.predict(
        handle_file(write(tmp_path / "latin1.csv", BAD["latin1.csv"])), "", api_name="/import_preview"
    )
    assert [row[1] for row in shown[0]["data"]] == ["good one", "good two"]  # the bad line 3 left out
    said = html.unescape(import_via(client, str(tmp_path / "latin1.csv"), "text", "id", []))
    assert "Imported 2" in said and "line 3: bytes that are not UTF-8" in said
    uploads = str(gradio.utils.get_upload_folder())
    good = write(tmp_path / "good.csv", "text,age\nhello,3\n")
    for name, body in BAD.items():
        path = write(tmp_path / name, body)
        for api_name, data in (("/import_preview", [""]), ("/import_items", ["", "text", "", ["age"], True])):
            if api_name == "/import_items":  # a preview of a file with these columns: the import may name them
                client.predict(handle_file(good), "", api_name="/import_preview")
            try:
                said = html.unescape(str(client.predict(handle_file(path), *data, api_name=api_name)))
            except Exception as exc:  # a refusal shown on the page
                said = html.unescape(str(exc))
            assert "list of choices" not in said and uploads not in said and str(tmp_path) not in said, said
            if name.startswith("random"):
                assert f"{name} is not a text file (CSV, JSONL) or a Parquet file" in said, (api_name, said)


def test_undo_browse_and_delete_on_sqlite_and_postgresql(db_url, tmp_path):
    from diffjev import Schema
    from diffjev.services import items as item_service
    from diffjev.services.importing import UndoRefused, undo_import
    from storage.db import Database
    from conftest import TICKETS

    db = Database(db_url)
    with db.session() as session:
        repo.create_project(session, "tickets", Schema.from_dict(TICKETS), "owner")
    first = import_items(
        db, "tickets", write(tmp_path / "a.csv", "id,text\na1,Printer 100%_ jam\na2,Other\n"), id_field="id"
    )
    second = import_items(db, "tickets", write(tmp_path / "b.csv", "id,text\nb1,Printer fire\n"), id_field="id")
    page = item_service.browse(db, "tickets", "PRINTER 100%_", "All", 1)  # case-blind, % and _ taken literally
    assert [r.external_id for r in page.rows] == ["a1"] and page.summary() == "Items 1–1 of 1."
    answer(db, items_where(db, Item.external_id == "b1")[0].id)
    assert [r.external_id for r in item_service.browse(db, "tickets", "", "Unanswered", 1).rows] == ["a1", "a2"]
    with pytest.raises(UndoRefused, match="1 of its 1 items is answered"):
        undo_import(db, "tickets", second.import_id, "owner")
    assert undo_import(db, "tickets", first.import_id, "owner") == 2
    (b1,) = items_where(db)
    with pytest.raises(item_service.DeleteRefused, match="1 of the 1 selected items is answered"):
        item_service.delete_items(db, "tickets", [b1.id], "owner", confirmed=True, with_answers=False)
    assert item_service.delete_items(db, "tickets", [b1.id], "owner", confirmed=True, with_answers=True) == 1
    assert items_where(db) == []


def test_the_items_view_keeps_hidden_fields_out_and_a_nul_search_matches_nothing(tmp_path, dgemma_engine):
    """A schema's hidden field (the gold answer) stays off the Items view as it stays off the card: before,
    opening an item listed `gold: SECRET`. A search for a NUL (which no item holds) matched every item."""
    from conftest import TICKETS
    import pandas as pd

    db = studio_db(tmp_path / "hidden.db", ["placeholder"], schema={**TICKETS, "samples": 1, "hidden_fields": ["gold"]})
    rows = pd.DataFrame({"id": ["g1", "g2"], "text": ["Card declined", "App crashes"], "gold": ["SECRET1", "SECRET2"]})
    import_items(db, "tickets", rows, id_field="id", context_fields=["gold"])
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        client = Client(server.url, verbose=False)
        opened = html.unescape(client.predict("g1", api_name="/items_open"))
        assert "Card declined" in opened and "SECRET1" not in opened, opened
        assert "hidden from annotators (kept in exports): gold" in opened, opened
        _, summary, selectable = client.predict("\x00", "All", 1, api_name="/items_browse")
        assert summary == "No items match." and selectable["choices"] == [], (summary, selectable)
        _, summary, _ = client.predict("", "All", 1, api_name="/items_browse")
        assert summary == "Items 1–3 of 3.", summary
    with db.read() as session:  # the value itself is kept, for exports
        assert session.scalar(select(Item.fields).where(Item.external_id == "g1")) == {"gold": "SECRET1"}


def test_an_item_removed_while_an_annotator_holds_it_gives_a_note_and_the_next_card(tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "removed.db", ["Kept ticket"])
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        annotator = Client(server.url, verbose=False)
        undone = import_via(
            annotator, write(tmp_path / "u.csv", "id,text\nu1,Undone one\nu2,Undone two\n"), "text", "id", []
        )
        import_via(annotator, write(tmp_path / "k.csv", "id,text\nk1,Kept one\nk2,Kept two\n"), "text", "id", [])
        assert "Kept ticket" in annotator.predict("team", "Unlabeled, in order", api_name="/annotate_start")[1]
        assert "Undone one" in annotator.predict(api_name="/pick_1")[1]  # held while its import is undone
        assert "2 items removed" in annotator.predict(import_id_of(undone), api_name="/import_undo")[0]
        note, card, *_ = annotator.predict(api_name="/pick_1")
        assert "This item was removed from the project (its import was undone or it was deleted)" in note
        assert "Here is the next one" in note and "Kept one" in card
        annotator.predict("", "All", 1, api_name="/items_browse")  # the page to select from
        (k1,) = items_where(db, Item.external_id == "k1")
        said = annotator.predict([str(k1.id)], True, False, "", "All", 1, api_name="/items_delete")[0]
        assert said == "Deleted 1 items."
        note, card, *_ = annotator.predict(api_name="/skip")
        assert "This item was removed from the project" in note and "Kept two" in card
    with db.read() as session:
        answered = session.scalars(select(Response.item_id)).all()
        kinds = session.scalars(select(Event.kind).where(Event.kind.like("response.%"))).all()
    assert [i.external_id for i in items_where(db, Item.id.in_(answered))] == ["t0"]
    assert kinds == ["response.submitted"]  # only the kept ticket's answer: nothing for the removed items
