"""Several vLLM-format servers behind one engine: the least busy one takes each read, a dead one is taken
out and its reads complete elsewhere, and a run stores every item exactly once."""

import time

import pytest
from sqlalchemy import func, select

from diffjev.engines import VLLMServerEngine
from diffjev.engines.base import EngineError
from diffjev.engines.servers import Servers, server_urls
from diffjev.serve import create_app
from diffjev.services.prelabel import prelabel
from storage.models import ItemRead
from conftest import SERVED_NAME, LocalServer
from test_faults import suggestion_rows
from test_runs import counts, project_db


def reads_per_item(db, run_id):
    with db.read() as session:
        return dict(
            session.execute(
                select(ItemRead.item_id, func.count()).where(ItemRead.run_id == run_id).group_by(ItemRead.item_id)
            ).all()
        )


def test_a_server_killed_mid_run_loses_no_read_and_stores_none_twice(tmp_path, dgemma_engine, tokenizer):
    servers = [LocalServer(create_app(dgemma_engine, SERVED_NAME, canvas_length=64)).__enter__() for _ in range(3)]
    db = project_db(tmp_path / "three.db", 40)
    engine = VLLMServerEngine([s.url for s in servers], SERVED_NAME, tokenizer, max_in_flight=3)
    killed = []

    def kill_one(progress):
        if progress.done >= 6 and not killed:
            killed.append(progress.done)
            servers[1].server.force_exit = True  # connections dropped, reads in flight on it cut off
            servers[1].__exit__(None, None, None)

    try:
        report = prelabel(db, "p", engine, batch_items=4, retries=1, progress=kill_one)
        health = engine.server_health()
    finally:
        engine.close()
        for s in (servers[0], servers[2]):
            s.__exit__(None, None, None)
    assert killed, "the run ended before a server could be killed"
    assert (report.status, report.read, report.failed) == ("completed", 40, 0)
    assert set(reads_per_item(db, report.run_id).values()) == {1}  # each item read and stored once
    ok, suggestions, _, orphans = counts(db, report.run_id)
    assert (ok, suggestions, orphans) == (40, 120, 0)
    # the dead one was put out with a backoff (how long it is out yet depends on how long the run took since)
    assert health[1]["failures"] >= 1 and health[1]["backoff_s"] > 0
    assert health[0]["reads"] > 0 and health[2]["reads"] > 0

    # The same reads as through one server: where a read was made changes nothing in what was stored.
    with LocalServer(create_app(dgemma_engine, SERVED_NAME, canvas_length=64)) as one:
        single = VLLMServerEngine(one.url, SERVED_NAME, tokenizer)
        db_one = project_db(tmp_path / "one.db", 40)
        alone = prelabel(db_one, "p", single)
        single.close()
    assert suggestion_rows(db, report.run_id) == suggestion_rows(db_one, alone.run_id)


def test_the_least_busy_server_takes_the_reads(dgemma_engine, tokenizer, schema):
    from diffjev import read_many

    fast = LocalServer(create_app(dgemma_engine, SERVED_NAME, canvas_length=64)).__enter__()
    slow = LocalServer(create_app(dgemma_engine, SERVED_NAME, canvas_length=64, service_latency_s=0.5)).__enter__()
    engine = VLLMServerEngine([slow.url, fast.url], SERVED_NAME, tokenizer, max_in_flight=2)
    try:
        decisions = list(read_many(schema, [f"ticket {i}: the export fails" for i in range(12)], engine))
        slow_reads, fast_reads = (h["reads"] for h in engine.server_health())
    finally:
        engine.close()
        fast.__exit__(None, None, None)
        slow.__exit__(None, None, None)
    assert len(decisions) == 12
    assert fast_reads > 2 * slow_reads  # while the slow one holds a read, the other takes the next ones


def test_all_servers_down_is_one_error_naming_them_and_a_4xx_is_not_retried_elsewhere():
    now = [0.0]
    servers = Servers(["http://a:1", "http://b:2"], clock=lambda: now[0])
    asked = []

    def down(url):
        asked.append(url)
        raise EngineError(f"cannot reach the vLLM server at {url}")

    with pytest.raises(EngineError, match="cannot reach"):
        servers.call(down, retriable=lambda e: True)
    assert sorted(asked) == ["http://a:1", "http://b:2"]  # each tried once, not forever
    assert [h["out_for_s"] for h in servers.health()] == [1.0, 1.0]
    asked.clear()
    with pytest.raises(EngineError):
        servers.call(down, retriable=lambda e: True)
    assert [h["out_for_s"] for h in servers.health()] == [2.0, 2.0]  # backoff doubles while they stay down
    now[0] = 10.0
    assert servers.call(lambda url: url, retriable=lambda e: True) in ("http://a:1", "http://b:2")

    bad_request = []

    def refused(url):
        bad_request.append(url)
        raise EngineError("400")

    with pytest.raises(EngineError):
        servers.call(refused, retriable=lambda e: False)
    assert len(bad_request) == 1


def test_server_lists_are_read_from_commas_and_files_and_bad_ones_named(tmp_path):
    listing = tmp_path / "servers.txt"
    listing.write_text("# the pool\nhttp://gpu-1:8000\n\nhttp://gpu-2:8000  # second\n")
    assert server_urls("http://a:1, http://b:2") == ["http://a:1", "http://b:2"]
    assert server_urls(str(listing)) == ["http://gpu-1:8000", "http://gpu-2:8000"]
    assert server_urls(f"@{listing},http://c:3") == ["http://gpu-1:8000", "http://gpu-2:8000", "http://c:3"]
    with pytest.raises(EngineError, match="named twice"):
        server_urls("http://a:1,http://a:1")
    with pytest.raises(EngineError, match="query or a fragment"):
        server_urls("http://a:1,http://b:2/?x=1")
    with pytest.raises(EngineError, match="cannot be read"):
        server_urls(f"@{tmp_path / 'missing.txt'}")
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(EngineError, match="names no server"):
        server_urls(str(tmp_path / "empty.txt"))
    with pytest.raises(EngineError, match="password|http://"):
        server_urls("ftp://user:secret@a:1")


def test_the_cli_takes_several_servers(tmp_path, dgemma_engine):
    from diffjev.engines.auto import EngineChoice, check_choice, choose_engine
    from diffjev.tiny import TINY_SERVED_NAME

    with pytest.raises(EngineError, match="one server"):
        check_choice(EngineChoice(kind="jev", url="http://a:1,http://b:2"))
    started = time.perf_counter()
    chosen = choose_engine(EngineChoice(kind="vllm", url="http://a:1,http://b:2", model=TINY_SERVED_NAME))
    assert chosen.description.startswith("vLLM servers at http://a:1, http://b:2")
    assert chosen.engine.servers == "http://a:1, http://b:2"
    chosen.engine.close()
    assert time.perf_counter() - started < 60
