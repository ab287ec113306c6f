"""Reads made in worker processes: the same Decisions, in order, as the engine in-process, and a run through
them stores the same suggestions and keeps its failure path."""

import functools
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from diffjev import read_many
from diffjev.engines import VLLMServerEngine
from diffjev.decide import Decision
from diffjev.engines.base import Engine, EngineError
from diffjev.engines.processes import ProcessEngine
from diffjev.services.prelabel import prelabel
from conftest import SERVED_NAME, STATES
from test_faults import suggestion_rows
from test_runs import counts, project_db


@pytest.fixture(scope="module")
def workers(vllm_server, tiny_model_folder):
    engine = ProcessEngine(
        functools.partial(VLLMServerEngine, vllm_server.url, SERVED_NAME, str(tiny_model_folder), max_in_flight=4),
        processes=2,
        chunk_items=4,
    )
    yield engine
    engine.close()


def local_run_rows(tmp_path, n_items, vllm_server, tokenizer):
    """The suggestions a run of the engine in this process stores for the same project."""
    local_db = project_db(tmp_path / "local.db", n_items)
    local = VLLMServerEngine(vllm_server.url, SERVED_NAME, tokenizer)
    alone = prelabel(local_db, "p", local, batch_items=8)
    local.close()
    return suggestion_rows(local_db, alone.run_id)


def test_worker_processes_read_what_one_process_reads_in_order(workers, vllm_server, tiny_model_folder, schema):
    states = [*STATES, *(f"Ticket {i}: the invoice export is late" for i in range(17))]
    local = VLLMServerEngine(vllm_server.url, SERVED_NAME, str(tiny_model_folder))
    expected = list(read_many(schema, states, local))
    local.close()
    got = list(read_many(schema, states, workers))
    assert len(got) == len(states)
    for a, b in zip(got, expected):
        assert {q: x.probabilities for q, x in a.answers.items()} == {q: x.probabilities for q, x in b.answers.items()}
        assert a.diagnostics["canvas_ids"] == b.diagnostics["canvas_ids"]
    assert (workers.name, workers.model_name) == ("vllm", SERVED_NAME)
    assert workers.url == vllm_server.url  # the engine's settings, as a run keeps them


def test_a_run_through_worker_processes_stores_what_a_local_run_stores(tmp_path, workers, vllm_server, tokenizer):
    db = project_db(tmp_path / "workers.db", 30)
    report = prelabel(db, "p", workers, batch_items=8)
    assert (report.status, report.read, report.failed) == ("completed", 30, 0)
    assert counts(db, report.run_id)[:2] == (30, 90)
    assert suggestion_rows(db, report.run_id) == local_run_rows(tmp_path, 30, vllm_server, tokenizer)


def test_a_dead_server_behind_worker_processes_fails_the_run_item_by_item(tmp_path, tiny_model_folder):
    from conftest import free_port

    dead = f"http://127.0.0.1:{free_port()}"
    engine = ProcessEngine(
        functools.partial(VLLMServerEngine, dead, SERVED_NAME, str(tiny_model_folder)), processes=2, chunk_items=4
    )
    db = project_db(tmp_path / "dead.db", 12)
    try:
        report = prelabel(db, "p", engine, batch_items=4, retries=1, stop_after=3)
    finally:
        engine.close()
    assert report.status == "failed" and "stopped after 3 items in a row failed" in report.error
    assert report.failures and all("cannot reach the vLLM server" in error for _, _, error in report.failures)


def _pid_holding(client_port: int, pids: list[int]) -> int | None:
    """Which of `pids` owns the local TCP socket on `client_port` (read from /proc), if any."""
    import os

    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == client_port:
                    inodes.add(f"socket:[{fields[9]}]")
    for pid in pids:
        try:
            links = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        except FileNotFoundError:
            continue
        if links & inodes:
            return pid
    return None


def _still_running(pid: int) -> bool:
    """Whether `pid` still runs: not a zombie waiting to be reaped, nor reaped already."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_worker_killed_mid_run_loses_no_read_and_is_started_again(
    tmp_path, vllm_server, dgemma_engine, tiny_model_folder, tokenizer
):
    """A worker that dies holding reads (killed, out of memory): the run reads what it held again, through a
    worker started in its place, and stores every item once, exactly as a local run does."""
    import os
    import signal

    from diffjev.serve import create_app
    from conftest import LocalServer

    app = create_app(dgemma_engine, SERVED_NAME, canvas_length=64)
    killed: list[tuple[int, int]] = []  # (worker index, pid)

    # The worker is killed as its second read request reaches the server, so it surely dies holding a read.
    # Killing it at the run's first stored batch did not: the run's reader could take every answer first,
    # and the killed worker then held nothing to read again (seen once in CI).
    @app.middleware("http")
    async def kill_a_worker_mid_read(request, call_next):
        pids = engine.worker_pids
        owner = _pid_holding(request.client.port, pids) if request.method == "POST" else None
        if owner is not None:
            seen[owner] = seen.get(owner, 0) + 1
            if not killed and seen[owner] == 2:
                killed.append((pids.index(owner), owner))
                os.kill(owner, signal.SIGKILL)
                while _still_running(owner):
                    time.sleep(0.01)  # dead before this request could be answered
        return await call_next(request)

    seen: dict[int, int] = {}
    db = project_db(tmp_path / "killed.db", 40)
    with LocalServer(app) as server:
        engine = ProcessEngine(
            functools.partial(VLLMServerEngine, server.url, SERVED_NAME, str(tiny_model_folder), max_in_flight=4),
            processes=2,
            chunk_items=4,
        )
        try:
            report = prelabel(db, "p", engine, batch_items=4)
            assert (report.status, report.read, report.failed) == ("completed", 40, 0)
            assert counts(db, report.run_id)[:2] == (40, 120)
            assert killed
            index, pid = killed[0]
            assert engine.worker_pids[index] != pid  # started again in its place
        finally:
            engine.close()
    assert suggestion_rows(db, report.run_id) == local_run_rows(tmp_path, 40, vllm_server, tokenizer)


def test_a_new_stream_of_reads_stops_the_one_left_unfinished(workers, schema):
    """One stream of items reads at a time: a caller that starts another without finishing the first (its
    generator left open) reads the new one whole, and the old one says why it stopped, never a wrong item."""
    # longer than the workers take ahead (window_items each), so the first stream must wait on them again
    first = workers.decide_many(schema, [f"Ticket {i}: first stream" for i in range(200)])
    next(first)
    second = [f"Ticket {i}: second stream" for i in range(6)]
    got = list(workers.decide_many(schema, second))
    assert len(got) == 6
    with pytest.raises(EngineError, match="another stream"):
        list(first)


def test_the_cli_reads_in_worker_processes(tmp_path, vllm_server, tiny_model_folder):
    import subprocess
    import sys

    project_db(tmp_path / "cli.db", 10)
    command = [sys.executable, "-m", "diffjev.cli", "prelabel", "--db", str(tmp_path / "cli.db"), "--project", "p"]
    command += ["--engine", "vllm", "--url", vllm_server.url, "--model", SERVED_NAME]
    command += ["--tokenizer", str(tiny_model_folder), "--workers", "2"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "reads in 2 worker processes" in done.stderr
    assert "completed: 10 read, 0 failed" in done.stdout
    refused = subprocess.run([*command[:-1], "-1"], capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "--workers must be 0" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_closing_ends_the_workers_still_holding_reads(tiny_model_folder, dgemma_engine, schema):
    """A stopped run drops its reads in flight; the workers holding them end with close(), not after their
    chunks (which kept Ctrl-C from stopping at once)."""
    import os
    import threading
    import time

    from diffjev.serve import create_app
    from conftest import LocalServer

    with LocalServer(create_app(dgemma_engine, SERVED_NAME, canvas_length=64, service_latency_s=60)) as slow:
        engine = ProcessEngine(
            functools.partial(VLLMServerEngine, slow.url, SERVED_NAME, str(tiny_model_folder)), processes=2
        )

        def read_until_closed():
            with pytest.raises(EngineError, match="the engine was closed"):
                list(engine.decide_many(schema, ["a"] * 8))

        reading = threading.Thread(target=read_until_closed, daemon=True)
        reading.start()
        workers = engine.worker_pids

        def holds_a_connection(pid: int) -> bool:  # its HTTP client's socket: its reads are out
            links = []
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
                except FileNotFoundError:  # closed since it was listed
                    pass
            return any(link.startswith("socket:") for link in links)

        deadline = time.monotonic() + 120
        while not all(holds_a_connection(pid) for pid in workers) and time.monotonic() < deadline:
            reading.join(0.1)
        assert all(holds_a_connection(pid) for pid in workers)
        started = time.monotonic()
        engine.close()

        # Ended: gone from the process table or a zombie, as the operating system sees it.
        def running(pid: int) -> bool:
            try:
                return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
            except FileNotFoundError:
                return False

        assert not any(running(pid) for pid in workers)
        assert time.monotonic() - started < 30  # not after the 60 s reads


def test_the_printed_resume_command_resumes_with_the_same_engine(tmp_path):
    from diffjev.cli import parser, resume_command

    given = ["prelabel", "--project", "p q", "--db", str(tmp_path / "x.db"), "--engine", "vllm"]
    given += ["--url", "http://user:pw@gpu-1:8000,http://gpu-2:8000", "--model", "m", "--workers", "2"]
    args = parser().parse_args(given)
    command = resume_command(args, 7)
    assert "pw" not in command  # a password in a server URL never reaches the terminal
    import shlex

    again = parser().parse_args(shlex.split(command)[1:])
    assert again.resume == "7" and again.project == "p q" and again.db == args.db
    assert (again.engine, again.model, again.workers) == ("vllm", "m", 2)
    assert again.url == "http://gpu-1:8000,http://gpu-2:8000"


class ResultsThatCannotBePickled(Engine):
    """An engine whose Decisions hold a function in their diagnostics: nothing a worker can send back."""

    name, model_name = "unpicklable", "none"

    def decide_many(self, schema, states, seed=0):
        for state in states:
            yield Decision({}, schema, {"callback": lambda: state})


def test_a_result_that_cannot_leave_its_worker_fails_by_name(schema):
    """A worker whose result will not pickle fails the read with an error that says so; the caller never
    waits for a message that was lost."""
    engine = ProcessEngine(ResultsThatCannotBePickled, processes=1)
    try:
        with pytest.raises(EngineError, match="could not leave the worker"):
            list(engine.decide_many(schema, ["a", "b"]))
    finally:
        engine.close()


def test_workers_end_when_their_caller_is_killed(tmp_path, tiny_model_folder):
    """A caller killed outright never closes its workers: they must not run on, orphaned, holding memory."""
    script = tmp_path / "caller.py"
    script.write_text(
        "import functools, time\n"
        "from diffjev.engines import VLLMServerEngine\n"
        "from diffjev.engines.processes import ProcessEngine\n"
        "if __name__ == '__main__':\n"
        f"    recipe = functools.partial(VLLMServerEngine, 'http://127.0.0.1:9', 'm', {str(tiny_model_folder)!r})\n"
        "    engine = ProcessEngine(recipe, processes=2)\n"
        "    print(*engine.worker_pids, flush=True)\n"
        "    time.sleep(600)\n"
    )
    caller = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    pids = [int(p) for p in caller.stdout.readline().split()]
    assert len(pids) == 2 and all(running(p) for p in pids)
    caller.send_signal(signal.SIGKILL)
    caller.wait(timeout=30)
    deadline = time.monotonic() + 30
    while any(running(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(running(p) for p in pids)


def running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie waiting to be reaped has ended)."""
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def test_ctrl_c_stops_a_run_with_a_failing_status_and_the_resume_command(tmp_path, vllm_server, tiny_model_folder):
    """A cancelled run exited 0, so `prelabel && next_step` went on as if every item were read."""
    db = project_db(tmp_path / "cancel.db", 2_000)
    command = [sys.executable, "-m", "diffjev.cli", "prelabel", "--db", str(tmp_path / "cancel.db"), "--project", "p"]
    command += ["--engine", "vllm", "--url", vllm_server.url, "--model", SERVED_NAME]
    command += ["--tokenizer", str(tiny_model_folder), "--batch", "8"]
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while counts(db)[0] == 0 and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    run.send_signal(signal.SIGINT)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 130, err[-2000:]
    assert " cancelled: " in out and "resume with: diffjev prelabel" in out
    assert 0 < counts(db)[0] < 2_000
