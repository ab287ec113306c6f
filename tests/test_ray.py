"""Reads on a Ray cluster (a local Ray instance here, and a real `ray start` head the CLI connects to): the
stored suggestions equal a local run's, for an in-process model and a server engine; a dead server fails
the run item by item as it does locally; a cancelled Ray run resumes and reads every item once."""

import functools
import threading

import pytest
import ray

from diffjev import read_many
from diffjev.engines import VLLMServerEngine
from diffjev.engines.auto import EngineChoice
from diffjev.engines.processes import engine_from_choice
from diffjev.engines.ray_data import RayEngine, start_ray
from diffjev.engines.transformers import TransformersEngine
from diffjev.services.prelabel import prelabel
from conftest import SERVED_NAME, STATES, free_port
from test_faults import suggestion_rows
from test_runs import counts, project_db


@pytest.fixture(scope="module")
def local_ray():
    assert start_ray(None, num_cpus=2, object_store_memory=200 * 2**20)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def model_recipe(tiny_model_folder):
    return functools.partial(
        engine_from_choice, EngineChoice(kind="transformers", model=str(tiny_model_folder), canvas_length=64)
    )


def test_an_in_process_model_on_ray_reads_what_it_reads_here_in_order(local_ray, model_recipe, schema):
    states = [*STATES, *(f"Ticket {i}: the invoice export is late" for i in range(21))]
    local = model_recipe()
    expected = list(read_many(schema, states, local))
    engine = RayEngine(model_recipe, workers=2, chunk_items=4, window_items=8)
    got = list(read_many(schema, states, engine))
    assert len(got) == len(states)
    # The same read in a Ray worker and here agreed to about 1e-7, not bit for bit (seen: 0.53947184 against
    # 0.53947178), likely because Ray gives a worker's torch another thread count (OMP_NUM_THREADS), so its
    # sums add in another order; not traced further.
    for a, b in zip(got, expected):
        assert {q: x.answer for q, x in a.answers.items()} == {q: x.answer for q, x in b.answers.items()}
        for qid, answer in b.answers.items():
            for name, p in answer.probabilities.items():
                assert a.answers[qid].probabilities[name] == pytest.approx(p, abs=1e-5)
        assert a.diagnostics["canvas_ids"] == b.diagnostics["canvas_ids"]
    assert (engine.name, engine.model_name) == (local.name, local.model_name)


def test_a_run_on_ray_stores_what_a_local_run_stores(tmp_path, local_ray, model_recipe, tiny_model_folder):
    db = project_db(tmp_path / "ray.db", 30)
    engine = RayEngine(model_recipe, workers=2, chunk_items=4, window_items=16)
    report = prelabel(db, "p", engine, batch_items=8)
    assert (report.status, report.read, report.failed) == ("completed", 30, 0)
    assert counts(db, report.run_id)[:2] == (30, 90)
    local_db = project_db(tmp_path / "local.db", 30)
    alone = prelabel(local_db, "p", TransformersEngine(str(tiny_model_folder), canvas_length=64), batch_items=8)
    # the same answers; confidences to 1e-5, as above (a Ray worker's torch adds on one thread)
    on_ray, here = suggestion_rows(db, report.run_id), suggestion_rows(local_db, alone.run_id)
    assert [row[:3] for row in on_ray] == [row[:3] for row in here]
    assert [row[3] for row in on_ray] == pytest.approx([row[3] for row in here], abs=1e-5)


def test_a_server_engine_on_ray_stores_what_a_local_run_stores(tmp_path, local_ray, vllm_server, tiny_model_folder):
    recipe = functools.partial(VLLMServerEngine, vllm_server.url, SERVED_NAME, str(tiny_model_folder), max_in_flight=4)
    engine = RayEngine(recipe, workers=2)
    assert engine.chunk_items == 4 and engine.url == vllm_server.url
    db = project_db(tmp_path / "ray.db", 20)
    report = prelabel(db, "p", engine, batch_items=8)
    local_db = project_db(tmp_path / "local.db", 20)
    alone = prelabel(local_db, "p", recipe(), batch_items=8)
    assert (report.status, report.read) == ("completed", 20)
    assert suggestion_rows(db, report.run_id) == suggestion_rows(local_db, alone.run_id)


def test_a_dead_server_behind_ray_fails_the_run_item_by_item(tmp_path, local_ray, tiny_model_folder):
    dead = f"http://127.0.0.1:{free_port()}"
    engine = RayEngine(functools.partial(VLLMServerEngine, dead, SERVED_NAME, str(tiny_model_folder)), workers=2)
    db = project_db(tmp_path / "dead.db", 12)
    report = prelabel(db, "p", engine, batch_items=4, retries=1, stop_after=3)
    assert report.status == "failed" and "stopped after 3 items in a row failed" in report.error
    # the engine's own error, not Ray's wrapper of it
    assert report.failures and all("cannot reach the vLLM server" in error for _, _, error in report.failures)


def test_a_cancelled_ray_run_resumes_and_reads_every_item_once(tmp_path, local_ray, model_recipe):
    db = project_db(tmp_path / "resume.db", 40)
    engine = RayEngine(model_recipe, workers=2, chunk_items=4, window_items=8)
    cancel = threading.Event()

    def stop_after_first_batch(progress) -> None:
        if progress.done >= 8:
            cancel.set()

    first = prelabel(db, "p", engine, batch_items=8, progress=stop_after_first_batch, cancel=cancel)
    assert first.status == "cancelled" and 8 <= first.read < 40
    again = prelabel(db, "p", engine, run_id=first.run_id, batch_items=8)
    assert (again.status, again.read, again.failed) == ("completed", 40, 0)
    assert counts(db, first.run_id)[:2] == (40, 120)  # 40 reads, 3 suggestions each, none twice


def test_a_schema_the_engine_cannot_read_is_refused_on_the_cluster_as_here(local_ray, model_recipe):
    from diffjev.errors import SchemaError
    from diffjev.schema import Schema

    too_long = Schema.from_dict(
        {
            "questions": [{"id": "urgent", "type": "yes_no", "instructions": "Urgent?"}],
            "template": "Reading the ticket closely, word by word. " * 20 + "Urgent: {urgent}",
        }
    )
    with pytest.raises(SchemaError) as here:
        model_recipe().check_schema(too_long)
    engine = RayEngine(model_recipe, workers=1)
    with pytest.raises(SchemaError) as there:  # the engine's own error, raised on the cluster
        engine.check_schema(too_long)
    assert str(there.value) == str(here.value)
