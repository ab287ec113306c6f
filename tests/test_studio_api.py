"""The studio's endpoints through gradio_client, with logins; and its Jev API over plain HTTP."""

import json
import threading
import time

import httpx
import pytest
from gradio_client import Client, handle_file
from sqlalchemy import func, select

from diffjev.engines.base import Engine
from storage.models import ItemRead, Response, Run
from studio_fixtures import serve_studio, studio_db

USERS = [("alice", "a-secret"), ("bob", "b-secret")]


@pytest.fixture(scope="module")
def studio(tmp_path_factory, dgemma_engine):
    folder = tmp_path_factory.mktemp("studio-api")
    db = studio_db(folder / "api.db", [f"Ticket {i}: something broke" for i in range(8)], dgemma_engine)
    server, context = serve_studio(db, dgemma_engine, auth=USERS)
    with server:
        yield server, db


def client(server, user):
    return Client(server.url, auth=user, verbose=False)


def test_two_annotators_never_get_the_same_leased_item(studio):
    server, db = studio
    alice, bob = client(server, USERS[0]), client(server, USERS[1])
    a = alice.predict("team", "Least confidence first", api_name="/annotate_start")
    b = bob.predict("team", "Least confidence first", api_name="/annotate_start")
    item_a, item_b = a[1], b[1]  # (gr.State is not returned to API clients)
    assert "dj-text" in item_a and "dj-text" in item_b and item_a != item_b  # two different items shown
    alice.predict(api_name="/accept")
    with db.read() as session:
        row = session.scalar(select(Response).where(Response.annotator == "alice"))
    assert row.source == "accepted" and row.suggestion_shown


def test_main_endpoints_import_prelabel_review_export(studio, tmp_path):
    server, _ = studio
    alice = client(server, USERS[0])
    path = tmp_path / "more.jsonl"
    path.write_text("\n".join(json.dumps({"text": f"New ticket {i}"}) for i in range(3)) + "\n{broken\n")
    _, text_column, _, _ = alice.predict(handle_file(str(path)), "", api_name="/import_preview")
    report = alice.predict(handle_file(str(path)), "", "text", "", [], api_name="/import_items")
    assert "Imported 3" in report and "line 4: not valid JSON" in report
    summary, failures = alice.predict(
        "the studio's engine", "", "", "Only items nobody has answered", api_name="/prelabel"
    )
    assert "completed" in summary and "0 failed" in summary
    with pytest.raises(Exception, match="needs a server URL"):
        alice.predict("vllm", "", "", "All items", api_name="/prelabel")
    per_question, *_ = alice.predict(api_name="/review")
    assert [row[0] for row in per_question["data"]] == ["urgent", "team", "tone"]
    note, download = alice.predict("csv", False, "", api_name="/export")
    assert "Exported 11 items" in note
    path = download["value"] if isinstance(download, dict) else download  # a component update comes as a dict
    path = path["path"] if isinstance(path, dict) else path
    assert open(path).readline().startswith("item_id,id,text")  # the import's own id column


def test_the_app_needs_a_login(studio):
    server, _ = studio
    assert httpx.get(f"{server.url}/config", timeout=10).status_code in (401, 403)
    with pytest.raises(Exception):
        Client(server.url, verbose=False).predict("team", "Least confidence first", api_name="/annotate_start")


def test_jev_api_answers_with_the_studios_engine(studio):
    server, _ = studio
    body = {
        "state": "Everything is down.",
        "questions": {
            "urgent": {"type": "noul", "instructions": "Urgent?"},
            "team": {"type": "choice", "instructions": "Team?", "criteria": {"billing": None, "tech": "bugs"}},
        },
    }
    assert httpx.post(f"{server.url}/v1/systemone", json=body, timeout=30).status_code == 401
    assert httpx.post(f"{server.url}/v1/systemone", json=body, timeout=30, auth=("alice", "wrong")).status_code == 401
    data = httpx.post(f"{server.url}/v1/systemone", json=body, timeout=30, auth=USERS[0]).json()
    assert data["object"] == "structured_decision"
    assert set(data["answers"]) == {"urgent", "team"} and data["answers"]["team"]["choice"] in ("billing", "tech")
    assert set(data["diagnostics"]["team"]) == {"label_mass", "argmax_is_label"}


@pytest.mark.parametrize(
    "change, says, param",
    [
        (
            {"questions": {"q": {"type": "choice", "instructions": "?", "criteria": {"a": None, "b": None}, "x": 1}}},
            "question 'q': unknown field(s) ['x']",
            "questions",
        ),
        (
            {"questions": {"q": {"type": "rating", "instructions": "?"}}},
            "question 'q': unknown question type",
            "questions",
        ),
        (
            {"questions": {"q": {"type": "bool", "instructions": "?"}}},
            "question 'q': unknown question type 'bool'",
            "questions",
        ),
        ({"questions": {"q": {"type": "score", "criteria": [str(i) for i in range(11)]}}}, "at most 10", "questions"),
        ({"questions": 5}, "questions: ", "questions"),
        ({"joint": 1}, "joint: ", "joint"),
        ({"surprise": True}, "surprise: Extra inputs", "surprise"),
        ({"priority": 2**63}, "priority: ", "priority"),
        ({"cache_salt": "a/b"}, "must not contain", "cache_salt"),
        ({"questions": {"u": {"type": "noul", "depends_on": ["nobody"]}}}, "nobody", "questions"),
    ],
)
def test_jev_api_refuses_as_vllm_033_does_with_a_400_naming_the_field(studio, change, says, param):
    server, _ = studio
    body = {"state": "x", "questions": {"u": {"type": "noul", "instructions": "?"}}, **change}
    response = httpx.post(f"{server.url}/v1/systemone", json=body, timeout=30, auth=USERS[0])
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == 400
    assert says in error["message"], error
    assert error["param"] == param, error


def test_jev_api_refuses_joint_reads_where_its_engine_reads_each_question_alone(tmp_path):
    """As vLLM 0.33 answers joint: true on a model without joint reads: a 400 naming `joint`, not a
    joint key left null without a word."""
    from diffjev.engines.autoregressive import AutoregressiveEngine
    from diffjev.tiny import tiny_causal_lm
    from diffjev.models import offline_gemma_tokenizer

    alone = AutoregressiveEngine(tiny_causal_lm(), offline_gemma_tokenizer(), mode="options")
    db = studio_db(tmp_path / "alone.db", ["one"])
    server, _ = serve_studio(db, alone)
    body = {
        "state": "Everything is down.",
        "questions": {"urgent": {"type": "noul", "instructions": "Urgent?"}, "tone": {"type": "noul"}},
    }
    with server:
        joint = httpx.post(f"{server.url}/v1/systemone", json={**body, "joint": True}, timeout=60)
        alone_read = httpx.post(f"{server.url}/v1/systemone", json=body, timeout=60)
    assert joint.status_code == 400 and joint.json()["error"]["param"] == "joint"
    assert "reads each question on its own" in joint.json()["error"]["message"]
    assert alone_read.status_code == 200 and alone_read.json()["joint"] is None


def test_jev_api_takes_what_vllm_033_takes(studio):
    """A question without instructions, a one-option choice, a JSON state, the extreme priority: read."""
    server, _ = studio
    body = {
        "state": {"ticket": "Everything is down.", "n": 3},
        "questions": {
            "urgent": {"type": "noul"},
            "only": {"type": "choice", "instructions": "Which?", "criteria": {"billing": None}},
        },
        "priority": -(2**63),
        "joint": True,
        "request_id": "r1",
    }
    response = httpx.post(f"{server.url}/v1/systemone", json=body, timeout=60, auth=USERS[0])
    assert response.status_code == 200, response.text
    data = response.json()
    assert data["id"] == "decision-r1" and data["answers"]["only"]["choice"] == "billing"
    assert data["answers"]["only"]["probabilities"] == {"billing": pytest.approx(1.0)}
    assert all(isinstance(d["argmax_is_label"], bool) for d in data["diagnostics"].values())
    # the studio reads every question on its template's one canvas: the joint key says where each slot is
    (canvas,) = data["joint"]["canvases"]
    assert canvas["questions"] == ["urgent", "only"] and len(canvas["slots"]) == 2
    unasked = httpx.post(f"{server.url}/v1/systemone", json={**body, "joint": False}, timeout=60, auth=USERS[0])
    assert unasked.json()["joint"] is None


def test_jev_api_login_refusals_are_vllm_errors(studio):
    server, _ = studio
    response = httpx.post(f"{server.url}/v1/systemone", json={}, timeout=30, auth=("alice", "wrong"))
    assert response.status_code == 401 and response.json()["error"]["code"] == 401
    assert response.headers["WWW-Authenticate"] == "Basic"


def test_any_answer_for_questions_with_more_than_nine_options(tmp_path, dgemma_engine):
    import pandas as pd

    from diffjev import Schema
    from diffjev.services.importing import import_items
    from diffjev.services.prelabel import prelabel
    from storage import repo
    from storage.db import Database

    names = [f"topic{i}" for i in range(12)]
    db = Database(tmp_path / "wide.db")
    with db.session() as session:
        repo.create_project(
            session,
            "wide",
            Schema.from_dict(
                {
                    "questions": [{"id": "topic", "type": "choice", "instructions": "Topic?", "options": names}],
                    "samples": 1,
                }
            ),
            "o",
        )
    import_items(db, "wide", pd.DataFrame({"text": ["one", "two"]}))
    prelabel(db, "wide", dgemma_engine)
    server, _ = serve_studio(db, dgemma_engine, name="wide")
    with server:
        c = Client(server.url, verbose=False)
        shown = c.predict("topic", "Unlabeled, in order", api_name="/annotate_start")
        (any_answer,) = [part for part in shown if isinstance(part, dict) and "choices" in part]  # the answer list
        assert [choice[0] for choice in any_answer["choices"]] == names  # every answer, not only nine
        c.predict("topic11", api_name="/answer")
    with db.read() as session:
        assert session.scalar(select(Response.value)) == "topic11"


class Gated(Engine):
    """The tiny engine, reading each item only once `go` is set: a run that stays reading until then."""

    def __init__(self, inner, go: threading.Event):
        self.inner, self.go = inner, go
        self.name, self.model_name = "gated", "tiny"

    def check_schema(self, schema):
        self.inner.check_schema(schema)

    def decide_many(self, schema, states, seed=42):
        for state in states:
            self.go.wait(60)
            yield from self.inner.decide_many(schema, [state], seed)


def test_a_run_still_reading_is_neither_resumed_twice_nor_deleted(tmp_path, dgemma_engine):
    from diffjev.services.prelabel import live_runs

    db = studio_db(tmp_path / "race.db", [f"Ticket {i}: the app is slow" for i in range(4)])
    go = threading.Event()
    server, _ = serve_studio(db, Gated(dgemma_engine, go), auth=USERS)
    with server:
        alice, bob = client(server, USERS[0]), client(server, USERS[1])
        started = alice.submit("the studio's engine", "", "", "All items", api_name="/prelabel")
        deadline = time.monotonic() + 30
        while 1 not in live_runs and time.monotonic() < deadline:
            time.sleep(0.05)
        assert 1 in live_runs, "alice's run never started reading"
        resumed = bob.submit("the studio's engine", "", "", "All items", "1", api_name="/prelabel_resume")
        with pytest.raises(Exception, match="run 1 is still reading; wait for it or cancel it"):
            resumed.result(timeout=30)
        assert 1 in live_runs  # bob's refused resume left alice's run registered
        with pytest.raises(Exception, match="run 1 is still reading; cancel it first"):
            bob.predict("1", True, api_name="/run_delete")  # ticked: refused all the same
        assert "Cancelling" in alice.predict(api_name="/prelabel_cancel")  # still reaches alice's run
        summary, _ = started.result(timeout=60)
        assert "Run 1 **cancelled**" in summary
        go.set()
        summary, _ = bob.predict("the studio's engine", "", "", "All items", "1", api_name="/prelabel_resume")
        assert "Run 1 **completed**: 4 items read, 0 failed" in summary
    with db.read() as session:
        assert session.scalars(select(Run.status)).all() == ["completed"]
        reads = session.scalars(select(ItemRead.item_id).where(ItemRead.run_id == 1)).all()
    assert sorted(reads) == [1, 2, 3, 4]


def test_a_run_is_deleted_only_with_its_tick(tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "delete-run.db", ["The site is down", "Refund my invoice"], dgemma_engine)
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        owner = Client(server.url, verbose=False)
        refused = owner.predict("1", False, api_name="/run_delete")[0]
        assert "tick" in refused and "Yes, delete run 1 and its suggestions; answers stay" in refused
        with db.read() as session:
            assert session.scalars(select(Run.id)).all() == [1]
        assert "Deleted run 1" in owner.predict("1", True, api_name="/run_delete")[0]
    with db.read() as session:
        assert session.scalars(select(Run.id)).all() == []


def test_undoing_a_skip_says_the_skip_is_taken_back_and_undoing_an_answer_says_the_answer_is_back(
    tmp_path, dgemma_engine
):
    db = studio_db(tmp_path / "undo-skip.db", ["The site is down", "Refund my invoice"], dgemma_engine)
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        annotator = Client(server.url, verbose=False)
        annotator.predict("team", "Unlabeled, in order", api_name="/annotate_start")
        annotator.predict(api_name="/skip")
        after_skip = str(annotator.predict(api_name="/undo"))
        annotator.predict(api_name="/accept")
        after_answer = str(annotator.predict(api_name="/undo"))
    assert "Undone: the skip is taken back; the item is here again." in after_skip
    assert "Undone: the last answer is back for another look." in after_answer


def test_undo_after_the_queue_ran_empty_takes_back_the_last_answer(tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "undo-empty.db", ["The site is down", "Refund my invoice"], dgemma_engine)
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        annotator = Client(server.url, verbose=False)
        annotator.predict("team", "Unlabeled, in order", api_name="/annotate_start")
        annotator.predict(api_name="/accept")
        emptied = str(annotator.predict(api_name="/accept"))
        assert "Nothing left in this queue" in emptied
        after = str(annotator.predict(api_name="/undo"))
    assert "Undone: the last answer is back for another look." in after
    with db.read() as session:
        assert session.scalar(select(func.count()).select_from(Response)) == 1
