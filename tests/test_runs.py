"""Pre-label runs under faults: a killed process, a failing server, a cancel; and many writers at once."""

import json
import signal
import subprocess
import sys
import threading
import time

import pandas as pd
import pyarrow as pa
import pytest
from sqlalchemy import func, select

from diffjev import Schema
from diffjev.engines import VLLMServerEngine
from diffjev.io import write_export
from diffjev.services.importing import import_items
from diffjev.services.prelabel import prelabel
from storage import repo
from storage.db import Database
from storage.models import Event, ItemRead, Response, Run, Suggestion
from conftest import SERVED_NAME, TICKETS
from faulty_servers import CannedFault

ONE_DRAW = {**TICKETS, "samples": 1}
CLI = [sys.executable, "-m", "diffjev.cli"]


def project_db(path, n_items, name="p"):
    db = Database(path)
    with db.session() as session:
        repo.create_project(session, name, Schema.from_dict(ONE_DRAW), "owner")
    import_items(db, name, pd.DataFrame({"text": [f"Ticket {i}: the app is slow" for i in range(n_items)]}))
    return db


def counts(db, run_id=None):
    with db.read() as session:
        where = [ItemRead.run_id == run_id] if run_id else []
        ok = session.scalar(select(func.count()).select_from(ItemRead).where(ItemRead.status == "ok", *where))
        suggestions = session.scalar(select(func.count()).select_from(Suggestion))
        distinct = session.scalar(
            select(func.count()).select_from(select(Suggestion.item_id, Suggestion.question_id).distinct().subquery())
        )
        orphans = session.scalar(
            select(func.count())
            .select_from(Suggestion)
            .where(
                ~select(ItemRead.id)
                .where(
                    ItemRead.run_id == Suggestion.run_id,
                    ItemRead.item_id == Suggestion.item_id,
                    ItemRead.status == "ok",
                )
                .exists()
            )
        )
    return ok, suggestions, distinct, orphans


def test_a_killed_prelabel_resumes_with_every_item_read_once(tmp_path, tiny_model_folder):
    n = 400
    path = tmp_path / "crash.db"
    db = project_db(path, n)
    args = [
        "prelabel",
        "--db",
        str(path),
        "--project",
        "p",
        "--engine",
        "transformers",
        "--model",
        str(tiny_model_folder),
        "--batch",
        "8",
    ]
    proc = subprocess.Popen(CLI + args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while counts(db)[0] < 24:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ok, suggestions, distinct, orphans = counts(db)
    assert 24 <= ok < n, "the kill must land mid-run"
    assert suggestions == 3 * ok and orphans == 0  # whole batches only
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
    with db.read() as session:
        assert session.scalar(select(Run.status)) == "running"  # killed: never marked finished
    done = subprocess.run(CLI + args + ["--resume"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "completed" in done.stdout
    ok, suggestions, distinct, orphans = counts(db)
    assert (ok, suggestions, distinct, orphans) == (n, 3 * n, 3 * n, 0)
    with db.read() as session:
        assert session.scalars(select(Run.status)).all() == ["completed"]


def test_two_processes_resuming_one_run_at_once_store_every_item_once(tmp_path, tiny_model_folder):
    # Two studios (or CLIs) sharing one database file cannot see each other's live runs: both may resume
    # the same run. Each item must still be stored once, and neither may fail on the other's reads.
    n = 200
    path = tmp_path / "twice.db"
    db = project_db(path, n)
    with db.session() as session:
        run = repo.create_run(
            session, 1, repo.latest_version(session, 1), "transformers", str(tiny_model_folder), None, {}, "owner"
        )
        run_id = run.id
    args = ["prelabel", "--db", str(path), "--project", "p", "--engine", "transformers"]
    args += ["--model", str(tiny_model_folder), "--batch", "8", "--resume", str(run_id)]
    both = [subprocess.Popen(CLI + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in "ab"]
    for proc in both:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-2000:]
        assert f"run {run_id} completed" in out
    assert counts(db) == (n, 3 * n, 3 * n, 0)


def test_a_failing_server_records_each_item_and_a_resume_completes_it(tmp_path, vllm_server, tokenizer):
    db = project_db(tmp_path / "faults.db", 6)
    body = json.dumps({"error": {"message": "EngineCore died", "type": "InternalServerError", "code": 500}})
    with CannedFault(500, body.encode()) as broken:
        engine = VLLMServerEngine(broken.url, SERVED_NAME, tokenizer)
        report = prelabel(db, "p", engine, retries=2, backoff_s=0.01)
        engine.close()
    assert (report.status, report.read, report.failed) == ("completed", 0, 6)
    # the status, never what the server answered (a body can hold anything the server knows)
    assert all(
        "answered 500 (Internal Server Error)" in error and "EngineCore died" not in error
        for _, _, error in report.failures
    )
    with db.read() as session:
        assert set(session.scalars(select(ItemRead.attempts))) == {2}
    healthy = VLLMServerEngine(vllm_server.url, SERVED_NAME, tokenizer)
    resumed = prelabel(db, "p", healthy, run_id=report.run_id)
    healthy.close()
    assert (resumed.status, resumed.read, resumed.failed) == ("completed", 6, 0)
    assert counts(db, report.run_id)[:2] == (6, 18)


def test_cancel_stops_between_batches_and_resume_finishes(tmp_path, dgemma_engine):
    db = project_db(tmp_path / "cancel.db", 20)
    cancel = threading.Event()
    seen = []

    def progress(p):
        seen.append((p.done, p.total))
        cancel.set()

    first = prelabel(db, "p", dgemma_engine, batch_items=5, progress=progress, cancel=cancel)
    # batches grow from one item (1, 2, 4, 5, 5 ...): the cancel comes after the first, of one item
    assert (first.status, first.read, seen) == ("cancelled", 1, [(1, 20)])
    second = prelabel(db, "p", dgemma_engine, run_id=first.run_id, batch_items=5)
    assert (second.status, second.read) == ("completed", 20)
    with pytest.raises(repo.Conflict, match="resume it with that engine"):
        prelabel(
            db, "p", VLLMServerEngine("http://127.0.0.1:9", SERVED_NAME, dgemma_engine.tokenizer), run_id=first.run_id
        )


WRITER = """
import sys
from storage.db import Database
from storage import repo
db = Database(sys.argv[1])
item_ids, question, annotator = list(map(int, sys.argv[2].split(","))), int(sys.argv[3]), sys.argv[4]
for item in item_ids:
    db.write(lambda s: repo.respond(s, repo.ResponseInput(item, question, annotator, "billing", "manual")))
"""


def test_threads_and_processes_write_at_once_without_loss_or_lock_errors(tmp_path):
    path = tmp_path / "busy.db"
    db = project_db(path, 60)
    with db.read() as session:
        project = repo.get_project(session, "p")
        _, rows = repo.version_schema(repo.latest_version(session, project.id))
        items = list(session.scalars(select(repo.Item.id)))
    question = rows["team"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), ",".join(map(str, items)), str(question), f"proc{k}"],
            stderr=subprocess.PIPE,
        )
        for k in range(2)
    ]
    errors = []

    def annotate(name):
        try:
            for item in items:
                db.write(lambda s: repo.respond(s, repo.ResponseInput(item, question, name, "account", "manual")))
        except Exception as exc:  # noqa: BLE001 - the assertion below shows what reached the caller
            errors.append(repr(exc))

    def hammer_one_row():  # read-modify-write of one shared row, from several threads
        try:
            for _ in range(40):
                db.write(
                    lambda s: repo.respond(s, repo.ResponseInput(items[0], question, "shared", "billing", "manual"))
                )
        except Exception as exc:  # noqa: BLE001
            errors.append(repr(exc))

    threads = [threading.Thread(target=annotate, args=(f"thread{k}",)) for k in range(6)]
    threads += [threading.Thread(target=hammer_one_row) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read().decode()[-2000:]
    assert errors == []
    with db.read() as session:
        responses = session.scalar(select(func.count()).select_from(Response))
        shared = session.scalar(select(Response.revision).where(Response.annotator == "shared"))
        events = session.scalar(select(func.count()).select_from(Event).where(Event.kind == "response.submitted"))
    assert responses == 8 * len(items) + 1
    assert shared == 120  # every one of the 3 × 40 updates counted: no lost update
    assert events == 8 * len(items) + 120


def test_a_failed_export_leaves_no_file_and_keeps_the_last_good_one(tmp_path):
    target = tmp_path / "labels.jsonl"
    target.write_text('{"ok": 1}\n')

    def batches():
        yield {"a": [1, 2]}
        raise RuntimeError("disk went away")

    with pytest.raises(RuntimeError):
        write_export(batches(), target, "jsonl", pa.schema([("a", pa.int64())]))
    assert target.read_text() == '{"ok": 1}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["labels.jsonl"]
