"""Importing: every source kind, nothing twice, and every bad row reported with its line number."""

import json

import datasets
import pandas as pd
import pytest
from sqlalchemy import func, select

from diffjev import Schema
from diffjev.io import SourceError, read_rows
from diffjev.services.importing import import_items
from storage import repo
from storage.db import Database
from storage.models import Item
from conftest import TICKETS


@pytest.fixture
def db(tmp_path):
    database = Database(tmp_path / "import.db")
    with database.session() as session:
        repo.create_project(session, "p", Schema.from_dict(TICKETS), "owner")
    return database


def count(db):
    with db.read() as session:
        return repo.count_items(session, repo.get_project(session, "p").id)


def test_csv_reimport_adds_nothing_and_bad_rows_are_named_by_line(db, tmp_path):
    path = tmp_path / "items.csv"
    path.write_bytes(
        b"id,text,plan\n"  # line 1
        b'1,"Site is down",pro\n'  # line 2
        b'2,"A note\nover two lines",free\n'  # lines 3-4
        b"3,,pro\n"  # line 5: empty text
        b'4,"Bad \xff\xfe bytes",pro\n'  # line 6: not UTF-8
        b"5,too,many,fields\n"  # line 7
        b'6,"Last one",team\n'
    )  # line 8
    first = import_items(db, "p", path, id_field="id")
    assert (first.imported, first.duplicates, first.rejected) == (3, 0, 3)
    assert [(r.line, r.reason) for r in first.rejects] == [
        (5, "empty text in field 'text'"),
        (6, "bytes that are not UTF-8"),
        (7, "4 fields where the header has 3"),
    ]
    again = import_items(db, "p", path, id_field="id")
    assert (again.imported, again.duplicates, again.rejected) == (0, 3, 3)
    assert count(db) == 3


def test_an_unclosed_quote_costs_its_own_row_and_no_other(db, tmp_path):
    """The lenient CSV reader ran row 2500's unclosed quote on into row 2501 and stored both as one item
    ("Imported 4999, rejected 0" for 5,000 rows); read strictly, but read on from where the reader stopped,
    a quote never closed lost every row after it (49,999 of 100,000). Only the row with the quote is left out."""
    rows = [f'q{i},"Ticket {i}",pro' for i in range(5000)]
    rows[2500] = 'q2500,"Ticket 2500 has an unclosed quote,pro'  # line 2502 (the header is line 1)
    rows[3000] = 'q3000,"Ticket 3000" and more,pro'  # line 3002: text after the closing quote
    rows[4000] = 'q4000,say "hi" there,pro'  # a quote inside an unquoted field is text, as in every reader
    rows[4500] = 'q4500,"two lines,\nkept as one field",pro'  # lines 4502-4503: a quoted line break is fine
    path = tmp_path / "items.csv"
    path.write_text("id,text,plan\n" + "\n".join(rows) + '\nq5000,"unclosed at the end\nq5001,last,pro\n')
    report = import_items(db, "p", path, id_field="id")
    assert (report.imported, report.rejected) == (4999, 3)  # 5,002 rows: all but three
    assert [r.line for r in report.rejects] == [2502, 3002, 5003]
    ran_on, after_quote, at_the_end = (r.reason for r in report.rejects)
    assert ran_on.startswith("a quote opens a field here and is not closed on this line")
    assert after_quote.startswith("text follows the closing quote of a field")
    assert at_the_end.startswith("a quote opens a field here") and "unexpected end of data" in at_the_end
    from sqlalchemy import select

    from storage.models import Item

    with db.read() as session:
        texts = {row.external_id: row.text for row in session.execute(select(Item.external_id, Item.text)).all()}
    assert texts["q2501"] == "Ticket 2501" and texts["q4000"] == 'say "hi" there' and texts["q5001"] == "last"
    assert texts["q4500"] == "two lines,\nkept as one field"
    assert "q2500" not in texts and "q3000" not in texts and "q5000" not in texts


def test_jsonl_without_ids_keys_on_content(db, tmp_path):
    path = tmp_path / "items.jsonl"
    path.write_bytes(
        b"\n".join(
            [
                json.dumps({"text": "same"}).encode(),  # line 1
                json.dumps({"text": "same"}).encode(),  # line 2: a duplicate of line 1
                b"{not json",  # line 3
                b"\xff\xfe",  # line 4: not UTF-8
                json.dumps({"body": "no text"}).encode(),  # line 5
                json.dumps(["a list"]).encode(),  # line 6
                json.dumps({"text": "same", "lang": "fr"}).encode(),  # line 7: same text, other context
            ]
        )
        + b"\n"
    )
    report = import_items(db, "p", path)
    assert report.imported == 2  # "same" once, and "same" with other context fields
    assert report.duplicates == 1
    assert [r.line for r in report.rejects] == [3, 4, 5, 6]
    assert "not valid JSON" in report.rejects[0].reason and "UTF-8" in report.rejects[1].reason
    assert import_items(db, "p", path).imported == 0


def test_a_jsonl_integer_past_pythons_digit_limit_is_a_named_row(db, tmp_path):
    """json.loads refuses an integer of more than 4,300 digits with a plain ValueError, which has no `msg`:
    the import ended in a traceback (AttributeError) and stored nothing after it."""
    path = tmp_path / "items.jsonl"
    path.write_text('{"id": 1, "text": "a", "n": ' + "9" * 5000 + '}\n{"id": 2, "text": "b"}\n')
    report = import_items(db, "p", path, id_field="id")
    assert (report.imported, report.rejected) == (1, 1)
    assert report.rejects[0].line == 1 and "not valid JSON" in report.rejects[0].reason
    assert "digits" in report.rejects[0].reason


def test_a_preview_refuses_a_column_name_too_long_to_show(tmp_path):
    """A 2,000,000-character column name went to the page in the table, both pickers and the state: a 16 MB
    answer. The preview names the column and the limit."""
    from diffjev.io import peek

    path = tmp_path / "long.csv"
    path.write_text("id,text," + "c" * 2_000_000 + "\n1,a,b\n")
    with pytest.raises(SourceError, match="column 3's name has 2,000,000 characters, over the 500"):
        peek(path)
    jsonl = tmp_path / "long.jsonl"
    jsonl.write_text('{"text": "a", "' + "k" * 600 + '": 1}\n')
    with pytest.raises(SourceError, match="column 2's name has 600 characters"):
        peek(jsonl)


@pytest.mark.parametrize("separator, name", [(";", "semicolons"), ("\t", "tabs")])
def test_a_csv_saved_with_another_separator_says_so(db, tmp_path, separator, name):
    """A spreadsheet in many locales saves CSV with semicolons: the refusal only listed "id;text" as the columns."""
    path = tmp_path / "items.csv"
    path.write_text(f"id{separator}text\n1{separator}Site down\n")
    with pytest.raises(SourceError, match=f"looks separated by {name}: save it with commas"):
        import_items(db, "p", path, id_field="id")


def test_parquet_dataframe_and_dataset_sources(db, tmp_path):
    frame = pd.DataFrame({"text": ["a", "b", None, "c"], "n": [1, 2, 3, 4]})
    frame.to_parquet(tmp_path / "items.parquet")
    report = import_items(db, "p", tmp_path / "items.parquet", context_fields=["n"])
    assert (report.imported, [r.line for r in report.rejects]) == (3, [3])
    assert import_items(db, "p", frame).duplicates == 3  # the same rows from a DataFrame
    datasets.Dataset.from_pandas(frame.assign(text=["d", "e", "f", "g"])).save_to_disk(str(tmp_path / "ds"))
    assert import_items(db, "p", tmp_path / "ds").imported == 4
    assert count(db) == 7
    with db.read() as session:
        stored = session.scalars(repo.select(repo.Item).order_by(repo.Item.id)).all()
    assert [i.text for i in stored] == ["a", "b", "c", "d", "e", "f", "g"]
    assert stored[0].fields == {"n": 1}


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda tmp: tmp / "missing.csv", "no file"),
        (lambda tmp: (tmp / "x.txt").write_text("hi") and tmp / "x.txt", "use a .csv, .jsonl or .parquet"),
        (lambda tmp: (tmp / "h.csv").write_text("body\nhello\n") and tmp / "h.csv", "no column 'text'"),
        (lambda tmp: "someone/some-dataset", "not a local folder"),
        # before: "no column 'text'; its columns are " with nothing after it
        (lambda tmp: (tmp / "empty.csv").write_bytes(b"") is not None and tmp / "empty.csv", "empty.csv is empty"),
        (lambda tmp: (tmp / "blank.jsonl").write_text("\n\n") and tmp / "blank.jsonl", "blank.jsonl is empty"),
    ],
)
def test_sources_that_cannot_be_imported_say_why_and_import_nothing(db, tmp_path, make, says):
    with pytest.raises(SourceError, match=says):
        import_items(db, "p", make(tmp_path))
    assert count(db) == 0


def test_large_files_stream_in_bounded_chunks(tmp_path):
    path = tmp_path / "big.jsonl"
    with open(path, "w") as f:
        for i in range(50_000):
            f.write(json.dumps({"text": f"item {i}"}) + "\n")
    rows = read_rows(path)
    first = next(rows)
    assert first.line == 1 and first.text == "item 0"  # rows come before the file is read through
    db = Database(tmp_path / "big.db")
    with db.session() as session:
        repo.create_project(session, "p", Schema.from_dict(TICKETS), "owner")
    chunks = []
    report = import_items(db, "p", path, chunk_rows=10_000, progress=lambda r: chunks.append(r.imported))
    assert report.imported == 50_000 and chunks == [10_000, 20_000, 30_000, 40_000, 50_000]


def test_a_jsonl_file_with_a_utf8_bom_imports_its_first_line(db, tmp_path):
    """Windows tools write UTF-8 with a byte-order mark; a CSV with one imported, a JSONL rejected line 1
    as "not valid JSON (Unexpected UTF-8 BOM)"."""
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"text": "first"}\n{"text": "second"}\n')
    report = import_items(db, "p", path)
    assert report.imported == 2 and report.rejects == [], report
    with db.read() as session:
        assert session.scalars(repo.select(repo.Item.text).order_by(repo.Item.id)).all() == ["first", "second"]


def test_a_parquet_file_whose_values_unpack_past_any_items_is_refused_before_they_are_decoded(
    db, tmp_path, monkeypatch
):
    """29 KB of zstd can hold three values of 300 MB: the row group's metadata says so, and nothing of it is
    decoded. At a small scale here: the limit lowered to 1 MB, values of 4 MB."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from diffjev import io

    monkeypatch.setattr(io, "PARQUET_VALUE_BYTES", 1024 * 1024)
    bomb = tmp_path / "bomb.parquet"
    fine = [f"ticket {i}" for i in range(5)]
    table = pa.table(
        {"id": [f"t{i}" for i in range(8)], "text": fine + [f"{i}" + "x" * 4 * 1024 * 1024 for i in range(3)]}
    )
    pq.write_table(table, bomb, compression="zstd", row_group_size=5)  # rows 1-5 fine, rows 6-8 the bomb
    assert bomb.stat().st_size < 64 * 1024
    decoded = []
    real = pq.ParquetFile.iter_batches
    monkeypatch.setattr(
        pq.ParquetFile, "iter_batches", lambda f, **kw: decoded.append(kw.get("row_groups")) or real(f, **kw)
    )
    with pytest.raises(SourceError, match=r"bomb.parquet: rows 6-8, column 'text': its values unpack to 4.0 MB each"):
        import_items(db, "p", bomb, id_field="id")
    assert decoded == [[0]]  # the good row group only, never the bomb's
    first = tmp_path / "bomb-first.parquet"
    pq.write_table(table.slice(5), first, compression="zstd")
    with pytest.raises(SourceError, match="bomb-first.parquet: rows 1-3, column 'text'"):
        io.peek(first)  # the preview reads the same way
    with db.read() as session:
        assert session.scalar(select(func.count()).select_from(Item)) == 0  # a refused import stores nothing


def test_an_imported_id_column_comes_back_under_its_own_name(db, tmp_path):
    from diffjev.formats.hub import read_diffjev_export
    from diffjev.services.exporting import export_project

    (tmp_path / "items.csv").write_text("ticket,text\nT-1,Site is down\nT-2,Refund please\n")
    import_items(db, "p", tmp_path / "items.csv", id_field="ticket")
    export_project(db, "p", tmp_path / "out.csv", "csv", reviewed_only=False)
    exported = pd.read_csv(tmp_path / "out.csv")
    assert "external_id" not in exported.columns
    assert list(exported.columns[:3]) == ["item_id", "ticket", "text"]
    assert list(exported["ticket"]) == ["T-1", "T-2"]
    again = import_items(db, "p", tmp_path / "out.csv", id_field="ticket")  # the export reads back as the same items
    assert (again.imported, again.duplicates) == (0, 2)
    export_project(db, "p", tmp_path / "hf", "hf", reviewed_only=False)
    assert [r.external_id for r in read_diffjev_export(tmp_path / "hf").records] == ["T-1", "T-2"]


@pytest.mark.parametrize("taken", ["item_id", "text", "urgent_model"])
def test_an_id_column_named_like_a_diffjev_column_is_exported_as_external_id(db, tmp_path, taken):
    from diffjev.services.exporting import export_project

    (tmp_path / "items.csv").write_text(f"{taken},body\nT-1,Site is down\n")
    import_items(db, "p", tmp_path / "items.csv", id_field=taken, text_field="body")
    export_project(db, "p", tmp_path / "out.csv", "csv", reviewed_only=False)
    exported = pd.read_csv(tmp_path / "out.csv")
    assert list(exported["external_id"]) == ["T-1"]
    assert list(exported.columns).count(taken) <= 1


def test_the_import_form_guesses_the_items_own_id_over_diffjevs_item_id():
    from diffjev.ui.data import guess_columns

    rows = [{"item_id": 1, "external_id": "T-1", "ticket": "T-1", "text": "Site is down"}]
    assert guess_columns(["item_id", "external_id", "text"], rows, "text") == ("text", "external_id")
    assert guess_columns(["item_id", "ticket", "text"], rows, "text", "ticket") == ("text", "ticket")
    assert guess_columns(["item_id", "text"], rows, "text", "ticket") == ("text", "item_id")


def test_an_export_read_back_ticks_none_of_diffjevs_own_columns_as_context(db, tmp_path):
    from diffjev.services.exporting import export_project
    from diffjev.ui.data import exported_columns

    (tmp_path / "items.csv").write_text("ticket,text,channel\nT-1,Site is down,mail\n")
    import_items(db, "p", tmp_path / "items.csv", id_field="ticket", context_fields=["channel"])
    export_project(db, "p", tmp_path / "out.csv", "csv", reviewed_only=False)
    columns = list(pd.read_csv(tmp_path / "out.csv").columns)
    own = exported_columns(columns)
    assert set(columns) - own == {"ticket", "text"}  # the id and text are picked apart; nothing else is context
    assert {"item_id", "fields", "urgent", "urgent_model", "team_distribution", "tone_answers"} <= own
    assert exported_columns(["ticket", "text", "channel", "item_id"]) == set()  # a file of the user's own
