"""The "Try a read" tab names its two probabilities of one answer apart: "confidence" (over the answers)
in the text, and "full-vocabulary probability", which is what the Jev JSON's `confidence` holds."""

import json

from gradio_client import Client

from diffjev.ui.playground import DEMO_SCHEMA
from studio_fixtures import serve_studio, studio_db


def test_the_text_and_the_jev_json_name_their_confidences_apart(tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "try.db", ["x"])
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        bars, jev, _ = Client(server.url, verbose=False).predict(
            json.dumps(DEMO_SCHEMA), "Everything is down.", api_name="/read"
        )
    for qid, shape in jev.items():
        top = max(shape["probabilities"].values())
        assert f"confidence {top:.3f}" in bars, qid  # normalised over the answers
        assert f"full-vocabulary probability {shape['confidence']:.3g}" in bars, qid  # the JSON's `confidence`
        assert shape["confidence"] < top  # the label mass is below 1 in a real vocabulary
