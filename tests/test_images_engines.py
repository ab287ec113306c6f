"""Reading items with images: the vLLM request carries the image as OpenAI/vLLM multimodal chat content (an
`image_url` part with a data URL, then the text), the Jev API request its `images`, and the in-process
engines refuse an item with an image rather than read its text alone."""

import base64
import io
import json

import httpx
import pytest
from PIL import Image as PILImage
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from diffjev import EngineError, Schema, read
from diffjev.engines import VLLMServerEngine
from diffjev.engines.jev_api import JevAPIEngine
from diffjev.images import ImageState, check_image
from diffjev.services.importing import import_items
from diffjev.services.prelabel import prelabel
from storage import repo
from storage.db import Database
from sqlalchemy import select

from storage.models import ItemRead, Suggestion
from conftest import SERVED_NAME, TICKETS, LocalServer

TEXT = "The screenshot shows the error on the checkout page."


def png(color=(10, 200, 30)) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (6, 4), color).save(out, "PNG")
    return out.getvalue()


def as_vllm_reads_it(body: dict) -> dict:
    """What a vLLM server with a vision model does with the user turn, for the text-only stand-in: the image
    parts are taken off (the stand-in model has no vision tower), the text part is the turn's text."""
    user = body["messages"][-1]
    if isinstance(user["content"], str):
        return body
    text = [p["text"] for p in user["content"] if p["type"] == "text"]
    return {**body, "messages": [*body["messages"][:-1], {**user, "content": text[0]}]}


@pytest.fixture(scope="module")
def vision_server(vllm_server):
    """A server in front of the stand-in vLLM server that records each request as sent."""
    seen: list[dict] = []

    async def chat(request: Request) -> Response:
        body = json.loads(await request.body())
        seen.append(body)
        async with httpx.AsyncClient() as client:
            answer = await client.post(f"{vllm_server.url}/v1/chat/completions", json=as_vllm_reads_it(body))
        return Response(answer.content, answer.status_code, media_type="application/json")

    async def models(request: Request) -> Response:
        async with httpx.AsyncClient() as client:
            answer = await client.get(f"{vllm_server.url}/v1/models")
        return Response(answer.content, answer.status_code, media_type="application/json")

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/v1/models", models)])
    with LocalServer(app) as server:
        server.seen = seen
        yield server


def test_the_vllm_request_sends_the_image_as_a_data_url_ahead_of_the_text(vision_server, tokenizer, schema):
    image = check_image(png(), 10**6)
    engine = VLLMServerEngine(vision_server.url, model=SERVED_NAME, tokenizer=tokenizer, max_in_flight=2)
    try:
        first = len(vision_server.seen)
        with_image = read(schema, ImageState(TEXT, image), engine)
        between = len(vision_server.seen)
        text_only = read(schema, TEXT, engine)
    finally:
        engine.close()
    sent, plain = vision_server.seen[first], vision_server.seen[between]
    assert all(isinstance(b["messages"][1]["content"], list) for b in vision_server.seen[first:between])
    system, user = sent["messages"]
    assert system == plain["messages"][0]
    image_part, text_part = user["content"]
    assert image_part["type"] == "image_url"
    url = image_part["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == png()
    assert text_part == {"type": "text", "text": TEXT}
    assert plain["messages"][1]["content"] == TEXT  # a text-only item's request is as before
    assert sent["vllm_xargs"] == plain["vllm_xargs"]  # the canvas is the same; only the user turn differs
    for qid, answer in text_only.answers.items():
        assert with_image.answers[qid].probabilities == pytest.approx(answer.probabilities)


def test_in_process_engines_refuse_an_item_with_an_image(dgemma_engine, schema):
    with pytest.raises(EngineError, match="the transformers engine reads text only, and this item has an image"):
        read(schema, ImageState(TEXT, check_image(png(), 10**6)), dgemma_engine)
    assert read(schema, TEXT, dgemma_engine).answers  # a text item still reads


def test_the_jev_api_request_carries_the_image(schema):
    engine = JevAPIEngine("http://127.0.0.1:9", model="dgemma")
    try:
        body = engine.request_body(schema, ImageState(TEXT, check_image(png(), 10**6)))
        plain = engine.request_body(schema, TEXT)
    finally:
        engine.close()
    assert body["state"] == TEXT and body["images"][0].startswith("data:image/png;base64,")
    assert "images" not in plain and {k: v for k, v in body.items() if k != "images"} == plain


@pytest.fixture
def image_project(tmp_path):
    db = Database(tmp_path / "images.db")
    with db.session() as session:
        repo.create_project(session, "p", Schema.from_dict(TICKETS), "owner")
    (tmp_path / "shot.png").write_bytes(png())
    source = tmp_path / "items.jsonl"
    source.write_text(json.dumps({"text": TEXT, "img": "shot.png"}) + "\n" + json.dumps({"text": "no image"}) + "\n")
    assert import_items(db, "p", source, image_field="img", image_folder=tmp_path).imported == 2
    return db


def test_a_run_over_image_items_reads_them_with_their_image(image_project, vision_server, tokenizer):
    engine = VLLMServerEngine(vision_server.url, model=SERVED_NAME, tokenizer=tokenizer, max_in_flight=2)
    before = len(vision_server.seen)
    try:
        report = prelabel(image_project, "p", engine)
    finally:
        engine.close()
    assert (report.status, report.read, report.failed) == ("completed", 2, 0)
    users = [body["messages"][1]["content"] for body in vision_server.seen[before:]]
    assert {type(u) for u in users} == {list, str}  # the image item as parts, the other as text
    with image_project.read() as session:
        assert session.query(Suggestion).count() == 2 * len(TICKETS["questions"])


def test_a_run_with_an_in_process_engine_names_the_image_items_it_cannot_read(image_project, dgemma_engine):
    report = prelabel(image_project, "p", dgemma_engine, retries=1)
    assert report.read == 1 and report.failed == 1
    assert "reads text only, and this item has an image" in report.failures[0][2]


def test_an_item_the_engine_can_never_read_is_tried_once_whatever_the_retries(image_project, dgemma_engine):
    # Retrying a read the engine refuses by what it is (text only) would fail the same way each time, with
    # the backoff in between: it is recorded at once.
    report = prelabel(image_project, "p", dgemma_engine, retries=3, backoff_s=5.0)
    assert report.read == 1 and report.failed == 1
    with image_project.read() as session:
        attempts = session.scalars(select(ItemRead.attempts).where(ItemRead.status == "failed")).all()
    assert attempts == [1]
