"""Staged questions in the studio, through the real app: the Project tab's preview says how many model
passes a read of the schema takes."""

import html
import json

from gradio_client import Client

from studio_fixtures import serve_studio, studio_db

STAGED = [
    {"id": "urgent", "type": "yes_no", "instructions": "Urgent?"},
    {"id": "team", "type": "choice", "instructions": "Team?", "options": ["billing", "technical"]},
    {"id": "calm", "type": "yes_no", "instructions": "Calm?", "alone": True},
    {"id": "outage", "type": "yes_no", "instructions": "Outage?", "ask_if": {"urgent": "yes"}},
]


def test_the_project_preview_says_how_many_passes_a_read_takes(tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "preview.db", ["The site is down"])
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        client = Client(server.url, verbose=False)
        staged = json.dumps({"questions": STAGED, "samples": 1})
        error, preview = client.predict(staged, "", api_name="/preview_schema")
        joint = json.dumps({"questions": STAGED[:2], "samples": 1})
        _, joint_preview = client.predict(joint, "", api_name="/preview_schema")
    assert not error
    assert (
        "A read of this schema takes 3 model passes (stage 1: urgent + team, then calm; stage 2: outage)."
        in html.unescape(preview)
    )
    assert "takes 1 model pass (every question on one canvas)." in html.unescape(joint_preview)
