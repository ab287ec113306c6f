"""Bad rows: one malformed row in the middle of a large file is rejected with its line and every other
row imports, on SQLite and PostgreSQL alike; no item text reaches stderr or the logs; an interrupted
import still records what it stored; CSV files never carry live spreadsheet formulas; item text is
capped at import."""

import csv
import json
import logging
import os
import subprocess
import sys
import time

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from diffjev import Schema
from diffjev.io import SourceError
from diffjev.services.exporting import export_project
from diffjev.services.importing import import_items
from storage import repo
from storage.db import Database
from storage.models import Event, Item
from conftest import SERVED_NAME, TICKETS

ROWS = 5_200
BAD_LINE = 2_500  # inside the first chunk of 5,000


@pytest.fixture
def db(db_url):
    database = Database(db_url)
    with database.session() as session:
        repo.create_project(session, "p", Schema.from_dict(TICKETS), "owner")
    yield database
    database.dispose()


def stored_ids(db):
    with db.read() as session:
        return set(session.scalars(select(Item.external_id)))


def jsonl_with(tmp_path, bad: bytes, name="items.jsonl"):
    """ROWS lines of good items, line BAD_LINE replaced by `bad`."""
    lines = [json.dumps({"id": f"i{n}", "text": f"secret item text {n}", "n": n}).encode() for n in range(1, ROWS + 1)]
    lines[BAD_LINE - 1] = bad
    path = tmp_path / name
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


DEEP = b'{"id": "bad", "text": "deep", "tree": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"

BAD_JSONL = {
    "lone surrogate in the text": (b'{"id": "bad", "text": "broken \\ud800 escape"}', "lone surrogate escape"),
    "lone surrogate in a field name": (b'{"id": "bad", "text": "ok", "k\\udc00": 1}', "context field"),
    # \udc80..\udcff are also what undecodable bytes become: an escape of one is still named as an escape
    "lone low surrogate escape in the id": (
        b'{"id": "sur-\\udc80", "text": "ok"}',
        "lone surrogate escape (such as \\ud800) in the field 'id'",
    ),
    "lone low surrogate escape in a context field": (
        b'{"id": "bad", "text": "ok", "note": "x\\udcff"}',
        "lone surrogate escape (such as \\ud800) in the field 'note'",
    ),
    "integer beyond 64 bits": (
        b'{"id": "bad", "text": "ok", "n": 123456789012345678901234567890}',
        "context field 'n' holds an integer beyond 64 bits",
    ),
    "JSON nested 100,000 deep": (DEEP, "nested too deep"),
    "NUL character in the text": (b'{"id": "bad", "text": "nul \\u0000 here"}', "NUL character in the text field"),
    "id longer than the column": (
        json.dumps({"id": "x" * 600, "text": "long id"}).encode(),
        "the id field 'id' has 600 characters, over the limit of 500",
    ),
    # the JSON encoder of the fields column would store these as null, and str() of these ids is no id
    "infinite number in a context field": (b'{"id": "bad", "text": "ok", "v": 1e999}', "holds an infinite number"),
    "infinite number nested in a context field": (b'{"id": "bad", "text": "ok", "v": [1, {"w": -1e999}]}', "'v'"),
    "an object as the id": (b'{"id": {"a": 1}, "text": "ok"}', "the id field 'id' holds dict"),
    "true as the id": (b'{"id": true, "text": "ok"}', "the id field 'id' holds bool"),
    "text over the cap": (
        json.dumps({"id": "bad", "text": "y" * 100_001}).encode(),
        "has 100,001 characters, over the limit of 100,000",
    ),
}


@pytest.mark.parametrize("case", BAD_JSONL)
def test_one_bad_jsonl_row_is_rejected_by_line_and_the_rest_import(db, tmp_path, case):
    bad, says = BAD_JSONL[case]
    report = import_items(db, "p", jsonl_with(tmp_path, bad), id_field="id")
    assert (report.imported, report.rejected) == (ROWS - 1, 1)
    assert [r.line for r in report.rejects] == [BAD_LINE]
    assert says in report.rejects[0].reason
    assert stored_ids(db) == {f"i{n}" for n in range(1, ROWS + 1) if n != BAD_LINE}


def csv_with(tmp_path, header: bytes, bad_row: bytes | None):
    rows = [b"%d,secret item text %d,x" % (n, n) for n in range(1, ROWS)]
    if bad_row is not None:
        rows[BAD_LINE - 2] = bad_row  # line 1 is the header
    path = tmp_path / "items.csv"
    path.write_bytes(header + b"\n" + b"\n".join(rows) + b"\n")
    return path


def test_a_csv_row_with_a_nul_character_is_rejected_by_line(db, tmp_path):
    path = csv_with(tmp_path, b"id,text,plan", b"bad,nul \x00 inside,x")
    report = import_items(db, "p", path, id_field="id")
    assert (report.imported, report.rejected) == (ROWS - 2, 1)
    assert [(r.line, "NUL character" in r.reason) for r in report.rejects] == [(BAD_LINE, True)]


def test_a_csv_header_with_bytes_that_are_not_utf8_is_named_and_nothing_is_half_imported(db, tmp_path):
    path = csv_with(tmp_path, b"id,text,pl\xffan", None)
    with pytest.raises(SourceError, match=r"line 1, the header: column 3 .* not UTF-8; save the file as UTF-8"):
        import_items(db, "p", path, id_field="id")
    assert stored_ids(db) == set()
    # Left out of the context, the column is not read, and every row imports.
    report = import_items(db, "p", path, id_field="id", context_fields=[])
    assert (report.imported, report.rejected) == (ROWS - 1, 0)


def test_the_text_cap_follows_the_setting_and_the_argument(db, tmp_path, monkeypatch):
    path = jsonl_with(tmp_path, json.dumps({"id": "bad", "text": "z" * 2_001}).encode())
    monkeypatch.setenv("DIFFJEV_MAX_ITEM_CHARS", "2000")
    report = import_items(db, "p", path, id_field="id")
    assert [r.line for r in report.rejects] == [BAD_LINE]
    assert "2,001 characters, over the limit of 2,000" in report.rejects[0].reason
    assert import_items(db, "p", path, id_field="id", max_chars=3_000).imported == 1  # only the long row is new
    monkeypatch.setenv("DIFFJEV_MAX_ITEM_CHARS", "lots")
    with pytest.raises(SourceError, match="DIFFJEV_MAX_ITEM_CHARS='lots'"):
        import_items(db, "p", path, id_field="id")


def fresh_database(postgres) -> str:
    """A new, empty database on the private PostgreSQL server."""
    import uuid

    import sqlalchemy as sa

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(postgres.url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    admin.dispose()
    return postgres.url.rsplit("/", 1)[0] + f"/{name}"


def test_a_chunk_the_database_refuses_is_stored_row_by_row_without_leaking_texts(
    postgres, tmp_path, monkeypatch, capfd, caplog
):
    """Past the checks (here: the id limit taken off), PostgreSQL refuses one row of a chunk: that row
    alone is rejected with the database's reason, and neither the logs nor stderr see any item text."""
    db = Database(fresh_database(postgres))
    with db.session() as session:
        repo.create_project(session, "p", Schema.from_dict(TICKETS), "owner")
    monkeypatch.setattr(repo, "EXTERNAL_ID_CHARS", 10_000)
    caplog.set_level(logging.DEBUG)
    report = import_items(
        db, "p", jsonl_with(tmp_path, json.dumps({"id": "x" * 600, "text": "long"}).encode()), id_field="id"
    )
    assert (report.imported, report.rejected) == (ROWS - 1, 1)
    assert report.rejects[0].line == BAD_LINE
    assert report.rejects[0].reason.startswith("the database refused it: value too long")
    out, err = capfd.readouterr()
    assert "secret item text" not in out + err + caplog.text
    db.dispose()


def cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "diffjev.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})},
    )


def test_cli_import_on_postgresql_rejects_bad_rows_and_prints_no_item_text(postgres, tmp_path):
    db_url = fresh_database(postgres)
    (tmp_path / "schema.json").write_text(json.dumps(TICKETS))
    assert cli("init", "--project", "p", "--schema", str(tmp_path / "schema.json"), "--db", db_url).returncode == 0
    lines = [json.dumps({"id": f"i{n}", "text": f"secret item text {n}"}) for n in range(1, ROWS + 1)]
    lines[BAD_LINE - 1] = json.dumps({"id": "nul", "text": "secret item text \x00 nul"})
    lines[BAD_LINE] = json.dumps({"id": "x" * 600, "text": "secret item text long id"})
    (tmp_path / "items.jsonl").write_text("\n".join(lines) + "\n")
    done = cli("import", "--project", "p", str(tmp_path / "items.jsonl"), "--id-field", "id", "--db", db_url)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "secret item text" not in done.stdout + done.stderr
    assert f"imported {ROWS - 2}, duplicates 0, rejected 2" in done.stdout
    assert f"line {BAD_LINE}: a NUL character" in done.stdout and f"line {BAD_LINE + 1}: the id field" in done.stdout


def test_an_interrupted_import_leaves_an_audit_event_for_what_it_stored(db, tmp_path):
    path = jsonl_with(tmp_path, json.dumps({"id": "i2500", "text": "fine"}).encode())

    def stop_after_the_first_chunk(report):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        import_items(db, "p", path, id_field="id", chunk_rows=1_000, progress=stop_after_the_first_chunk)
    with db.read() as session:
        events = session.scalars(select(Event.payload).where(Event.kind == "items.imported")).all()
    assert len(stored_ids(db)) == 1_000
    assert events == [
        {"source": str(path), "imported": 1_000, "duplicates": 0, "rejected": 0, "interrupted": "KeyboardInterrupt"}
    ]


# CSV exports ---------------------------------------------------------------------------------------------

FORMULAS = ['=HYPERLINK("http://x","y")', "+1+cmd|' /C calc'!A0", "-2+3", "@SUM(A1)", "\tTAB", "\rCR"]
HARMLESS = ["-5", "+3.25", "plain text"]


def csv_texts(path):
    with open(path, newline="", encoding="utf-8") as f:
        return {row["id"]: row for row in csv.DictReader(f)}


def test_cli_csv_export_neutralises_formulas_unless_told_not_to(db_url, db, tmp_path):
    import pandas as pd

    texts = FORMULAS + HARMLESS
    import_items(db, "p", pd.DataFrame({"id": [f"t{i}" for i in range(len(texts))], "text": texts}), id_field="id")
    out = tmp_path / "out.csv"
    done = cli("export", "--project", "p", "--format", "csv", "--out", str(out), "--all", "--db", db_url)
    assert done.returncode == 0, done.stderr
    rows = csv_texts(out)
    assert [rows[f"t{i}"]["text"] for i in range(len(texts))] == ["'" + t for t in FORMULAS] + HARMLESS
    assert all(int(r["item_id"]) > 0 for r in rows.values())  # numbers stay numbers
    done = cli(
        "export", "--project", "p", "--format", "csv", "--out", str(out), "--all", "--no-csv-escape", "--db", db_url
    )
    assert done.returncode == 0, done.stderr
    assert [csv_texts(out)[f"t{i}"]["text"] for i in range(len(texts))] == texts


def test_a_header_cell_named_by_an_import_is_escaped_like_any_cell(db, tmp_path):
    """The export names the id column after the import's id field, which is anyone's text."""
    import pandas as pd

    named = '=HYPERLINK("http://evil.example/x","click")'
    import_items(db, "p", pd.DataFrame({named: ["t1"], "text": ["plain"]}), id_field=named)
    export_project(db, "p", tmp_path / "out.csv", "csv", reviewed_only=False)
    with open(tmp_path / "out.csv", newline="", encoding="utf-8") as f:
        header = next(csv.reader(f))
    assert header[:3] == ["item_id", "'" + named, "text"]
    export_project(db, "p", tmp_path / "raw.csv", "csv", reviewed_only=False, csv_escape=False)
    with open(tmp_path / "raw.csv", newline="", encoding="utf-8") as f:
        assert next(csv.reader(f))[1] == named


@pytest.fixture(scope="module")
def formula_studio(tmp_path_factory, dgemma_engine):
    from studio_fixtures import serve_studio, studio_db

    folder = tmp_path_factory.mktemp("formula-studio")
    db = studio_db(folder / "studio.db", FORMULAS + HARMLESS, dgemma_engine)
    with db.session() as session:  # a run whose model name is someone's formula
        project = repo.get_project(session, "tickets")
        repo.create_run(
            session,
            project.id,
            repo.latest_version(session, project.id),
            "vllm",
            "=cmd|' /C calc'!A0",
            None,
            {},
            "owner",
        )
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        yield server


def downloaded(value):
    path = value["value"] if isinstance(value, dict) and "value" in value else value
    return path["path"] if isinstance(path, dict) else path


def test_studio_csv_export_and_runs_compared_neutralise_formulas(formula_studio, monkeypatch):
    from gradio_client import Client

    client = Client(formula_studio.url, verbose=False)
    _, download = client.predict("csv", False, "", api_name="/export")
    rows = csv_texts(downloaded(download))
    assert [rows[f"t{i}"]["text"] for i in range(len(FORMULAS + HARMLESS))] == ["'" + t for t in FORMULAS] + HARMLESS
    _, compared, _ = client.predict(api_name="/compare_runs")
    with open(downloaded(compared), newline="", encoding="utf-8") as f:
        models = {row["model"] for row in csv.DictReader(f)}
    assert "'=cmd|' /C calc'!A0" in models and "=cmd|' /C calc'!A0" not in models

    monkeypatch.setenv("DIFFJEV_CSV_ESCAPE", "0")
    _, download = client.predict("csv", False, "", api_name="/export")
    rows = csv_texts(downloaded(download))
    assert [rows[f"t{i}"]["text"] for i in range(len(FORMULAS))] == FORMULAS
    _, compared, _ = client.predict(api_name="/compare_runs")
    with open(downloaded(compared), newline="", encoding="utf-8") as f:
        assert "=cmd|' /C calc'!A0" in {row["model"] for row in csv.DictReader(f)}


# What reaches the model ------------------------------------------------------------------------------------


def test_a_state_past_the_models_context_is_cut_before_the_prompt_and_the_read_says_so(tokenizer, schema):
    from diffjev.engines import TransformersEngine
    from diffjev.read import read_many
    from diffjev.tiny import tiny_masked_lm

    model = tiny_masked_lm()
    model.config.max_position_embeddings = 512  # a model whose context holds 512 positions
    engine = TransformersEngine(model, tokenizer, canvas_length=64)
    long_state, short_state = "The printer is on fire again. " * 2_000, "Short ticket."
    long_read, short_read = read_many(schema, [long_state, short_state], engine)
    cut = long_read.diagnostics["truncated"]
    assert cut["state_chars"] == len(long_state) and 0 < cut["kept_chars"] < len(long_state)
    assert cut["max_prompt_tokens"] == 512 - 64
    assert len(long_read.diagnostics["prompt_ids"]) <= 512 - 64
    assert "truncated" not in short_read.diagnostics


def test_an_in_process_model_reads_at_most_the_hosts_context_not_its_own(tokenizer, schema):
    """The studio's offline model says 32,768 positions: a 10 MB state sent to the studio's /v1/systemone was
    cut to that and read for 8 minutes at 8.8 GB. An in-process read takes at most --max-model-len's 8192
    tokens, as serve-model does, or less where asked."""
    import time

    from diffjev.engines import AutoregressiveEngine
    from diffjev.read import read_many
    from diffjev.tiny import tiny_causal_lm

    model = tiny_causal_lm()
    model.config.max_position_embeddings = 32_768  # Gemma 3 270M's own
    engine = AutoregressiveEngine(model, tokenizer, mode="options", canvas_length=64)
    assert engine.builder.max_prompt_tokens == 8192 - 64
    started = time.perf_counter()
    (long_read,) = read_many(schema, ["word " * 2_097_152], engine)  # 10 MB
    cut = long_read.diagnostics["truncated"]
    assert cut["max_prompt_tokens"] == 8192 - 64 and cut["kept_chars"] < 8192 * 8
    assert set(long_read.answers) == {"urgent", "team", "tone"}
    assert time.perf_counter() - started < 120
    shorter = AutoregressiveEngine(model, tokenizer, mode="options", canvas_length=64, max_model_len=1024)
    assert shorter.builder.max_prompt_tokens == 1024 - 64


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.fixed_dictionaries(
            {"text": st.text(min_size=1)},
            optional={
                "id": st.one_of(st.text(), st.integers()),
                "extra": st.recursive(
                    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                    max_leaves=8,
                ),
            },
        ),
        min_size=1,
        max_size=6,
    )
)
def test_every_row_read_is_one_the_databases_can_store(tmp_path, records):
    """Any record: either rejected with a reason, or a Row whose text and id PostgreSQL and SQLite both
    take (no NUL, no surrogate) and whose fields the JSON column's encoder takes."""
    import orjson

    from diffjev.io import Limits, Row, read_rows

    path = tmp_path / "any.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    for result in read_rows(path, id_field="id", limits=Limits(max_text_chars=1_000, max_id_chars=500)):
        if isinstance(result, Row):
            for value in (result.text, result.external_id or ""):
                assert "\x00" not in value
                value.encode("utf-8")  # raises on a surrogate, as the database drivers do
            assert len(result.external_id or "") <= 500
            orjson.dumps(result.fields)
        else:
            assert result.line >= 1 and result.reason


def test_the_served_model_refuses_a_prompt_past_its_context_as_vllm_does(vllm_server):
    """A 10 MB message once made the served model ask for hundreds of gigabytes: it is a 400 now, before
    any forward, and the model card says how long a request may be."""
    card = httpx.get(f"{vllm_server.url}/v1/models", timeout=30).json()["data"][0]
    limit = card["max_model_len"]
    assert limit == 8192  # serve-model's --max-model-len: the tiny model's own 131,072 would take the memory
    body = {
        "model": SERVED_NAME,
        "max_tokens": 4,
        "logprobs": True,
        "top_logprobs": 2,
        "vllm_xargs": {"diffusion_canvas_length": 64, "diffusion_max_steps": 1, "diffusion_read_only": True},
    }
    for content in ("x" * 10_000_000, "word " * 140_000):
        started = time.monotonic()
        answer = httpx.post(
            f"{vllm_server.url}/v1/chat/completions",
            timeout=120,
            json={**body, "messages": [{"role": "user", "content": content}]},
        )
        assert answer.status_code == 400, answer.text[:300]
        error = answer.json()["error"]
        assert f"maximum context length is {limit} tokens" in error["message"] and error["param"] == "messages"
        assert time.monotonic() - started < 60
    fine = httpx.post(
        f"{vllm_server.url}/v1/chat/completions",
        timeout=120,
        json={**body, "messages": [{"role": "user", "content": "The export is broken."}]},
    )
    assert fine.status_code == 200, fine.text[:300]


def test_the_vllm_client_cuts_a_state_to_the_context_the_server_states(tokenizer, schema):
    import copy

    from diffjev.engines import TransformersEngine, VLLMServerEngine
    from diffjev.read import read_many
    from diffjev.serve import create_app
    from diffjev.tiny import tiny_diffusion_gemma
    from conftest import LocalServer

    model = copy.deepcopy(tiny_diffusion_gemma())
    model.config.get_text_config().max_position_embeddings = 512  # a served model whose context is 512
    served = TransformersEngine(model, tokenizer, canvas_length=64)
    with LocalServer(create_app(served, SERVED_NAME, canvas_length=64)) as server:
        engine = VLLMServerEngine(server.url, SERVED_NAME, tokenizer, canvas_length=64)
        long_state = "The printer is on fire again. " * 2_000
        long_read, short_read = read_many(schema, [long_state, "Short ticket."], engine)
        engine.close()
    cut = long_read.diagnostics["truncated"]
    assert cut["state_chars"] == len(long_state) and 0 < cut["kept_chars"] < len(long_state)
    assert cut["max_prompt_tokens"] == 512 - 64
    assert "truncated" not in short_read.diagnostics and set(long_read.answers) == {"urgent", "team", "tone"}
