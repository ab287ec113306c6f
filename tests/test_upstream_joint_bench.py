"""vLLM 0.33's joint canvas layout in `diffjev.jev`: the user turn, the answer lines, the chunking rule and
the noise seeded by the prompt, as `DiffusionGemmaCanvasStrategy.read_joint` builds them."""

from __future__ import annotations

import pytest

from diffjev import Schema
from diffjev import jev as jev_layouts


@pytest.fixture(scope="module")
def upstream_joint():
    return jev_layouts


def test_one_canvas_holds_numbered_answer_lines_and_the_turn_close(upstream_joint, dgemma_engine, schema, tokenizer):
    builder = dgemma_engine.builder
    (canvas,) = upstream_joint.joint_canvases(builder, schema, "The site is down.", "Tickets.", 64)
    system, user = canvas.messages
    assert system == {"role": "system", "content": "Tickets."}
    assert user["content"].startswith("The site is down.\n\nQuestion 1: Does the customer need a reply")
    assert "\n\nQuestion 2: Which team should handle it?\nA: billing\nB: technical - bugs, outages\n" in user["content"]
    assert user["content"].endswith(upstream_joint.JOINT_REPLY)
    # the canvas head (the closed thought block, where the vocabulary has one) ends the prompt
    assert canvas.prompt_ids == builder.prompt_ids(canvas.messages) + builder.format.head_ids
    ids = list(canvas.ids)
    for k, q in enumerate(schema.questions, 1):  # each slot holds noise after "k:" and before a newline
        slot = canvas.slots[q.id]
        line = ids[:slot] + [canvas.label_ids[q.id][0]]
        assert tokenizer.decode(line).endswith(f"{k}: {q.labels[0]}")
        assert ids[slot + 1] == tokenizer.encode("\n", add_special_tokens=False)[0]
    last = max(canvas.slots.values())
    assert ids[last + 2] == builder.format.turn_close_id and set(ids[last + 3 :]) == {builder.format.pad_id}
    assert len(ids) % 16 == 0 and canvas.reply_tokens == last + 1
    again = upstream_joint.joint_canvases(builder, schema, "The site is down.", "Tickets.", 64)[0]
    assert again.ids == canvas.ids  # the noise is seeded by the prompt
    other = upstream_joint.joint_canvases(builder, schema, "The site is up.", "Tickets.", 64)[0]
    assert [other.ids[p] for p in other.slots.values()] != [ids[p] for p in canvas.slots.values()]


def test_questions_split_into_the_fewest_even_chunks_that_fit(upstream_joint, dgemma_engine):
    assert upstream_joint.joint_chunks([5] * 10, 64) == [(0, 10)]  # 1 + 50 < 64
    assert upstream_joint.joint_chunks([5] * 13, 64) == [(0, 7), (7, 13)]  # 1 + 65 does not fit
    assert upstream_joint.joint_chunks([70, 5], 64) == [(0, 1), (1, 2)]  # nothing fits: one each
    many = Schema.from_dict(
        {"questions": [{"id": f"q{i}", "type": "yes_no", "instructions": f"Is {i} true?"} for i in range(20)]}
    )
    canvases = upstream_joint.joint_canvases(dgemma_engine.builder, many, "x", "", 64)
    assert len(canvases) > 1 and all(c.width <= 64 for c in canvases)
    assert [q for c in canvases for q in c.slots] == [q.id for q in many.questions]
    second = canvases[1].messages[-1]["content"]  # numbering carries on across the chunks
    first_number = len(canvases[0].slots) + 1
    assert f"Question {first_number}: Is {first_number - 1} true?" in second
