"""Where the empty thought block `<|channel>thought\\n<channel|>` goes. vLLM's DiffusionGemma strategy puts
it at the end of the prompt, outside the canvas; so does diffjev by default: nothing added where the chat
template's generation prompt already closes it (Gemma 4's does with thinking off: a canvas head too would
read it twice), a continued final assistant message where it does not, the canvas head only when asked
(`thought="canvas"`, djev's layout). The real Gemma tokenizer gains the two tags as special tokens here,
the only change from the suite's tokenizer, and a tiny DiffusionGemma reads with a vocabulary to match."""

import json

import httpx
import pytest

from diffjev import read_many
from diffjev.canvas import THOUGHT_BLOCK, CanvasBuilder, ModelFormat
from diffjev.engines import TransformersEngine, VLLMServerEngine
from diffjev.models import GEMMA_CHAT_TEMPLATE
from diffjev.serve import create_app
from diffjev.tiny import tiny_diffusion_gemma
from conftest import STATES, LocalServer

# Gemma 4's generation prompt with thinking off: the model turn opens with the thought block closed.
CLOSING_TEMPLATE = GEMMA_CHAT_TEMPLATE.replace(
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}",
    "{% if add_generation_prompt %}<start_of_turn>model\n<|channel>thought\n<channel|>{% endif %}",
)
SERVED = "diffjev/tiny-thought"


def tagged_tokenizer(tokenizer, folder, template):
    from transformers import AutoTokenizer

    tokenizer.save_pretrained(folder)
    tagged = AutoTokenizer.from_pretrained(folder)
    tagged.add_special_tokens({"additional_special_tokens": ["<|channel>", "<channel|>"]})
    tagged.chat_template = template
    tagged.save_pretrained(folder)  # the server and the client each load it from here
    return tagged


@pytest.fixture(scope="module")
def opening(tokenizer, tmp_path_factory):
    """A template whose generation prompt leaves the thought block to the reply (Gemma 3's turn format)."""
    return tagged_tokenizer(tokenizer, tmp_path_factory.mktemp("opening"), GEMMA_CHAT_TEMPLATE)


@pytest.fixture(scope="module")
def closing(tokenizer, tmp_path_factory):
    return tagged_tokenizer(tokenizer, tmp_path_factory.mktemp("closing"), CLOSING_TEMPLATE)


def builder(tokenizer, thought="prompt"):
    return CanvasBuilder(tokenizer, ModelFormat.from_tokenizer(tokenizer), 64, thought=thought)


def test_a_template_that_closes_the_block_gets_no_second_one_on_the_canvas(closing, schema):
    built = builder(closing)
    head = built.format.head_ids
    assert head and built.thought_placement == "template"
    canvas = built.build(schema, STATES[0], seed=1)
    assert canvas.prompt_ids[-len(head) :] == head
    assert canvas.prompt_ids.count(head[0]) == 1 and head[0] not in canvas.ids  # read once, in the prompt
    assert [m["role"] for m in canvas.messages] == ["system", "user"]


def test_by_default_the_block_ends_the_prompt_as_a_continued_assistant_message(opening, schema):
    built = builder(opening)
    head = built.format.head_ids
    assert built.thought_placement == "message"
    canvas = built.build(schema, STATES[1], seed=1)
    assert canvas.messages[-1] == {"role": "assistant", "content": THOUGHT_BLOCK}
    text = opening.apply_chat_template(list(canvas.messages[:2]), tokenize=False, add_generation_prompt=True)
    assert canvas.prompt_ids == tuple(opening(text, add_special_tokens=False)["input_ids"]) + head
    assert head[0] not in canvas.ids
    djev = builder(opening, thought="canvas").build(schema, STATES[1], seed=1)
    assert djev.ids[: len(head)] == head and djev.prompt_ids[-len(head) :] != head
    # the same template text follows the head in both layouts; its slots move by the head's length
    assert {q: p + len(head) for q, p in canvas.slots.items()} == djev.slots


def test_a_vocabulary_without_the_tags_has_no_block_to_place(tokenizer, schema):
    built = builder(tokenizer)
    assert built.thought_placement == "none" and built.canvas_head == ()


@pytest.fixture(scope="module")
def thought_model(opening):
    return tiny_diffusion_gemma(vocab_size=len(opening))


def test_a_server_read_with_the_block_in_the_prompt_is_the_in_process_read(thought_model, opening, schema):
    """serve-model continues the assistant message as the client asks, so the slots read over HTTP are the
    in-process read of the same weights and prompt."""
    here = TransformersEngine(thought_model, opening, canvas_length=64)
    assert here.thought_layout == "message"
    sent = []
    app = create_app(here, SERVED, canvas_length=64)

    @app.middleware("http")
    async def keep(request, call_next):
        sent.append(await request.body())
        return await call_next(request)

    folder = opening.name_or_path
    with LocalServer(app) as server:
        client = VLLMServerEngine(server.url, SERVED, folder, max_in_flight=2)
        got = list(read_many(schema, STATES, client))
        client.close()
        chat = [b for b in sent if b"diffusion_seed_canvas" in b]  # the client's reads
        read = json.loads(chat[0])
        both = httpx.post(f"{server.url}/v1/chat/completions", json={**read, "add_generation_prompt": True}, timeout=30)
        not_bool = httpx.post(
            f"{server.url}/v1/chat/completions", json={**read, "continue_final_message": "yes"}, timeout=30
        )
    expected = list(read_many(schema, STATES, here))
    for a, b in zip(got, expected):
        assert a.diagnostics["canvas_ids"] == b.diagnostics["canvas_ids"]
        for qid in a.answers:
            assert a.answers[qid].probabilities == pytest.approx(b.answers[qid].probabilities, abs=1e-5)
    assert chat and all(b'"continue_final_message":true' in b and b'"add_generation_prompt":false' in b for b in chat)
    assert both.status_code == 400 and "Cannot set both" in both.json()["error"]["message"]
    assert not_bool.status_code == 400 and not_bool.json()["error"]["param"] == "continue_final_message"
