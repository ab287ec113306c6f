"""The adjudication endpoints through Gradio's HTTP API on a real studio with password logins: an
annotator who is not a reviewer is refused (and nothing is stored), an admin settles the case."""

import pytest
from gradio_client import Client
from sqlalchemy import select

from storage import repo
from storage.db import Database
from storage.models import Adjudication
from studio_fixtures import serve_studio
from test_adjudicate_service import answer, project

USERS = [("rita", "rita-secret"), ("ann", "ann-secret")]


def test_an_annotator_cannot_adjudicate_through_the_api_and_a_reviewer_can(tmp_path, dgemma_engine, monkeypatch):
    monkeypatch.setenv("DIFFJEV_ADMINS", "rita")
    db = Database(tmp_path / "api.db")
    ids = project(db, items=2)
    answer(db, ids, "t0", "ann", "billing", 1.0)
    answer(db, ids, "t1", "ann", "technical", 1.0)
    with db.session() as session:  # naming reviewers leaves the other members answering only
        repo.set_reviewers(session, "p", ["rita"], "owner")
    server, _ = serve_studio(db, dgemma_engine, name="p", auth=USERS)
    with server:
        rita = Client(server.url, auth=USERS[0], verbose=False)
        # one annotator so far: no disagreement, and the tab says so and how to review what was answered
        said = rita.predict("latest", False, False, api_name="/adjudicate_cases")[1]
        assert "No disagreement: 2 answers given" in said and "Any answered item" in said, said
        assert "No item has an answer yet" not in said
        answer(db, ids, "t0", "bob", "technical", 1.0)
        ann = Client(server.url, auth=USERS[1], verbose=False)
        for call in (
            lambda: ann.predict("t0", "team", "billing", "", "mine", "latest", False, False, api_name="/adjudicate"),
            lambda: ann.predict("latest", False, False, api_name="/adjudicate_cases"),
        ):
            with pytest.raises(Exception, match="Adjudication is for the reviewers and admins of p"):
                call()
        with db.read() as session:
            assert session.scalars(select(Adjudication)).all() == []
        said = rita.predict("t0", "team", "billing", "", "ok", "latest", False, False, api_name="/adjudicate")[0]
        assert "settled as **billing**" in said
        with db.read() as session:
            [row] = session.scalars(select(Adjudication)).all()
        assert (row.value, row.reviewer, row.comment) == ("billing", "rita", "ok")
