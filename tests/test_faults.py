"""Faults, each a test: the server goes away, answers slowly or wrongly; the process is killed mid-commit
and mid-export; the disk fills; another writer holds the database."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pandas as pd
import pytest
from gradio_client import Client
from sqlalchemy import select

from diffjev.engines import VLLMServerEngine
from diffjev.io import ExportError
from diffjev.services.exporting import export_project
from diffjev.services.prelabel import prelabel
from storage.models import Response, Suggestion
from conftest import SERVED_NAME, LocalServer
from faulty_servers import CannedFault, Silent
from studio_fixtures import serve_studio, studio_db
from test_runs import counts, project_db


def integrity(db) -> str:
    with db.engine.connect() as conn:
        return conn.exec_driver_sql("PRAGMA integrity_check").scalar()


def suggestion_rows(db, run_id):
    with db.read() as session:
        return sorted(
            session.execute(
                select(Suggestion.item_id, Suggestion.question_id, Suggestion.answer, Suggestion.confidence).where(
                    Suggestion.run_id == run_id
                )
            ).all()
        )


def test_the_server_going_away_mid_run_stops_it_and_a_resume_completes_it(tmp_path, dgemma_engine, tokenizer):
    from diffjev.serve import create_app

    db = project_db(tmp_path / "gone.db", 40)
    server = LocalServer(create_app(dgemma_engine, SERVED_NAME, canvas_length=64)).__enter__()
    engine = VLLMServerEngine(server.url, SERVED_NAME, tokenizer, max_in_flight=2)

    gone = []

    def server_goes_away(progress):  # batches grow 1, 2, 4, 8, 8 ...: after the fourth, 15 items are stored
        if progress.done >= 8 and not gone:
            gone.append(progress.done)
            server.__exit__(None, None, None)  # the port closes: every later read is refused

    report = prelabel(
        db, "p", engine, batch_items=8, retries=2, backoff_s=0.01, stop_after=4, progress=server_goes_away
    )
    engine.close()
    assert report.status == "failed"
    assert "stopped after 4 items in a row failed" in report.error and "cannot reach" in report.error
    assert report.read >= 8 and report.failed >= 4
    assert all("cannot reach the vLLM server" in error for _, _, error in report.failures)
    ok, suggestions, _, orphans = counts(db, report.run_id)
    assert suggestions == 3 * ok and orphans == 0 and integrity(db) == "ok"
    kept = suggestion_rows(db, report.run_id)

    with LocalServer(create_app(dgemma_engine, SERVED_NAME, canvas_length=64)) as back:
        engine = VLLMServerEngine(back.url, SERVED_NAME, tokenizer)
        resumed = prelabel(db, "p", engine, run_id=report.run_id)
        engine.close()
    assert (resumed.status, resumed.read, resumed.failed) == ("completed", 40, 0)
    after = suggestion_rows(db, report.run_id)
    assert len(after) == 120 and set(kept) <= set(after)  # what was stored before is still there, unchanged


def test_per_request_timeouts_hold_and_cancel_returns_while_reads_hang(tmp_path, tokenizer):
    db = project_db(tmp_path / "slow.db", 3)
    with Silent() as silent:
        engine = VLLMServerEngine(silent.url, SERVED_NAME, tokenizer, timeout=0.5)
        report = prelabel(db, "p", engine, retries=1, backoff_s=0.01)
        engine.close()
        assert (report.status, report.read, report.failed) == ("completed", 0, 3)
        assert all("did not answer within the timeout (0.5 s)" in error for _, _, error in report.failures)

        hanging = VLLMServerEngine(silent.url, SERVED_NAME, tokenizer, timeout=120)
        cancel = threading.Event()
        threading.Timer(0.5, cancel.set).start()
        started = time.monotonic()
        cancelled = prelabel(db, "p", hanging, cancel=cancel)
        waited = time.monotonic() - started
        hanging.close()
    assert cancelled.status == "cancelled"
    assert waited < 10, "cancel must not wait for reads the server holds (up to the 120 s timeout)"


@pytest.mark.parametrize(
    "status, body, says",
    [
        (500, {"error": {"message": "EngineCore died", "code": 500}}, "answered 500 (Internal Server Error)"),
        (
            200,
            {"choices": [{"index": 0, "message": {"role": "assistant", "content": "yes"}}]},
            "has no usable choices[0].logprobs.content",
        ),
    ],
)
def test_a_500_or_an_answer_without_logprobs_is_a_clear_error_for_each_item(tmp_path, tokenizer, status, body, says):
    db = project_db(tmp_path / "wrong.db", 4)
    with CannedFault(status, json.dumps(body).encode()) as broken:
        engine = VLLMServerEngine(broken.url, SERVED_NAME, tokenizer)
        report = prelabel(db, "p", engine, retries=1, backoff_s=0.01)
        engine.close()
    assert (report.status, report.failed) == ("completed", 4)
    assert len(report.failures) == 4
    for _, _, error in report.failures:
        assert says in error and broken.url in error
        assert "EngineCore died" not in error  # the status and a fixed description, never the body


def kill_when_paused(child: subprocess.Popen, marker, limit_s: float = 240) -> None:
    """SIGKILL `child` once it writes `marker`: the moment it holds at the point under test."""
    deadline = time.monotonic() + limit_s
    while not marker.exists():
        assert child.poll() is None, child.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, "the child never reached the point to kill it at"
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()


PAUSE_IN_COMMIT = """
import sys, time
from pathlib import Path
from sqlalchemy import event
from diffjev.engines import TransformersEngine
from diffjev.services.prelabel import prelabel
from storage.db import Database

db = Database(sys.argv[1])
marker = Path(sys.argv[3])

@event.listens_for(db.engine, "commit")
def hold_the_fifth_batch(conn):  # its rows are written in the transaction, the COMMIT not yet sent
    # Batches grow 1, 2, 4, 8, 8 ...: the first four hold 15 items; past that, the fifth is being committed.
    if conn.exec_driver_sql("SELECT count(*) FROM item_reads").scalar() > 15 and not marker.exists():
        marker.write_text("in commit")
        time.sleep(600)

prelabel(db, "p", TransformersEngine(sys.argv[2]), batch_items=8)
"""


def test_sigkill_during_a_batch_commit_leaves_whole_batches(tmp_path, tiny_model_folder):
    path, marker = tmp_path / "commit.db", tmp_path / "marker"
    db = project_db(path, 40)
    child = subprocess.Popen(
        [sys.executable, "-c", PAUSE_IN_COMMIT, str(path), str(tiny_model_folder), str(marker)], stderr=subprocess.PIPE
    )
    kill_when_paused(child, marker)
    assert integrity(db) == "ok"
    ok, suggestions, distinct, orphans = counts(db)
    assert ok == 15, "the four committed batches stay; the fifth, killed inside its commit, leaves nothing"
    assert (suggestions, distinct, orphans) == (45, 45, 0)


PAUSE_IN_EXPORT = """
import sys, time
from pathlib import Path
from diffjev.services.exporting import export_project
from storage.db import Database

marker = Path(sys.argv[3])

def hold(count):  # the first rows are in the temporary file; the file is not finished
    marker.write_text(str(count))
    time.sleep(600)

export_project(Database(sys.argv[1]), "p", sys.argv[2], sys.argv[4], reviewed_only=False, progress=hold)
"""


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "hf"])
def test_sigkill_during_an_export_leaves_no_half_file(tmp_path, fmt):
    path, marker, out = tmp_path / "export.db", tmp_path / "marker", tmp_path / "out"
    out.mkdir()
    project_db(path, 30)
    target = out / f"labels.{fmt}"
    child = subprocess.Popen(
        [sys.executable, "-c", PAUSE_IN_EXPORT, str(path), str(target), str(marker), fmt], stderr=subprocess.PIPE
    )
    kill_when_paused(child, marker)
    assert not target.exists(), "nothing under the export's name"
    left = [p.name for p in out.iterdir()]
    assert all(name.startswith(f".labels.{fmt}.{child.pid}.") and name.endswith(".partial") for name in left)

    from storage.db import Database

    assert export_project(Database(path), "p", target, fmt, reviewed_only=False) == 30
    assert [p.name for p in out.iterdir()] == [target.name], "the next export removes what the killed one left"


FILL_THE_DISK = """
import json, os, sys
from diffjev.io import ExportError
from diffjev.services.exporting import export_project
from storage.db import Database

target = os.path.join(sys.argv[2], "labels." + sys.argv[3])
try:
    export_project(Database(sys.argv[1]), "p", target, sys.argv[3], reviewed_only=False)
    outcome = "written"
except ExportError as exc:
    outcome = str(exc)
print(json.dumps({"outcome": outcome, "left": sorted(os.listdir(sys.argv[2]))}))
"""


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_a_full_disk_during_export_is_a_clear_error_and_leaves_no_file(tmp_path, fmt):
    path, small = tmp_path / "full.db", tmp_path / "small"
    small.mkdir()
    db = project_db(path, 10)
    from diffjev.services.importing import import_items

    import_items(db, "p", pd.DataFrame({"text": [f"Ticket {i}: " + os.urandom(600).hex() for i in range(400)]}))
    # A 128 KiB tmpfs in a private mount namespace (as root, or as a user through a user namespace).
    script = f'mount -t tmpfs -o size=128k tmpfs {small} && exec {sys.executable} -c "$0" "$@"'
    done = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script, FILL_THE_DISK, str(path), str(small), fmt],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["outcome"].startswith(f"the export could not be written to labels.{fmt}: no space left")
    assert str(small) not in result["outcome"], "the message never says where the server keeps the file"
    assert "free some space or choose another folder" in result["outcome"]
    assert result["left"] == [], "no file under the final name and no temporary one"


def test_export_error_is_the_one_type_callers_catch():
    assert issubclass(ExportError, Exception) and not issubclass(ExportError, OSError)


def test_a_database_locked_by_another_writer_makes_the_answer_wait_not_fail(tmp_path, dgemma_engine):
    path = tmp_path / "locked.db"
    db = studio_db(path, [f"Ticket {i}: the export is broken" for i in range(4)], dgemma_engine)
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        annotator = Client(server.url, verbose=False)
        annotator.predict("team", "Least confidence first", api_name="/annotate_start")
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")  # another writer holds the write lock for 3 s
        other.execute("INSERT INTO events (at, actor, kind, payload) VALUES (CURRENT_TIMESTAMP, 'other', 'held', '{}')")
        threading.Timer(3.0, lambda: other.execute("COMMIT")).start()
        started = time.monotonic()
        card = annotator.predict(api_name="/accept")
        waited = time.monotonic() - started
    other.close()
    assert waited >= 2.5, "the answer was written while the other writer held the lock"
    assert "⚠️" not in json.dumps(card, ensure_ascii=False) and "dj-text" in card[1]
    with db.read() as session:
        stored = session.scalars(select(Response.source)).all()
    assert stored == ["accepted"]


def test_a_database_failure_while_listing_items_fails_the_run_instead_of_completing_it(
    tmp_path, dgemma_engine, monkeypatch
):
    from storage import repo

    db = project_db(tmp_path / "listing.db", 20)
    pages = []
    real = repo.pending_item_ids

    def second_page_fails(*args, **kwargs):
        pages.append(1)
        if len(pages) == 2:
            raise OSError("disk I/O error")
        return real(*args, **kwargs)

    monkeypatch.setattr(repo, "pending_item_ids", second_page_fails)
    report = prelabel(db, "p", dgemma_engine, batch_items=8)
    assert report.status == "failed" and "reading the pending items failed: OSError: disk I/O error" in report.error
    assert report.read == 8  # the first page was read and stored; nothing claims the rest was done
