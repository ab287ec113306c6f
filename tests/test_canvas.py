"""Canvas building with the real Gemma tokenizer: fixed text decodes back to the template, slots hold
seeded noise (never a label), widths are the smallest multiple of 16, and bad templates are refused."""

import copy

import pytest

from diffjev import Schema, SchemaError
from diffjev.canvas import CanvasBuilder, ModelFormat, WIDTH_STEP, draw_seed
from conftest import TICKETS


@pytest.fixture(scope="module")
def builder(tokenizer):
    return CanvasBuilder(tokenizer, ModelFormat.from_tokenizer(tokenizer, "uniform"), max_width=64)


def template_span(canvas, fmt):
    """The canvas ids between the head and the turn-close token."""
    ids = list(canvas.ids)
    end = ids.index(fmt.turn_close_id, len(fmt.head_ids))
    return ids[len(fmt.head_ids) : end], end


@pytest.mark.parametrize("template", [None, "Urgent: {urgent}\nTeam: {team}\nTone: {tone}/3"])
def test_fixed_text_decodes_to_the_template_and_each_label_fills_its_slot(builder, tokenizer, template):
    schema = Schema.from_dict({**TICKETS, **({"template": template} if template else {})})
    canvas = builder.build(schema, "Everything is down.", seed=42)
    span, end = template_span(canvas, builder.format)
    # Every label of every question, put in its slot, makes the canvas spell the template exactly.
    for q in schema.questions:
        for i, label in enumerate(q.labels):
            filled = list(span)
            fill = {}
            for other in schema.questions:
                choice = i if other is q else 0
                filled[canvas.slots[other.id] - len(builder.format.head_ids)] = canvas.label_ids[other.id][choice]
                fill[other.id] = other.labels[choice]
            assert tokenizer.decode(filled) == schema.template.render(fill)
    # After the template: the turn close, then padding up to the width.
    assert canvas.ids[end] == builder.format.turn_close_id
    assert set(canvas.ids[end + 1 :]) <= {builder.format.pad_id}


def test_slots_hold_seeded_noise_never_a_label(builder, schema):
    a = builder.build(schema, "x", seed=7)
    again = builder.build(schema, "x", seed=7)
    other = builder.build(schema, "x", seed=draw_seed(7, 1))
    assert a.ids == again.ids  # reproducible
    for qid, pos in a.slots.items():
        assert a.ids[pos] not in a.label_ids[qid]
        assert 0 <= a.ids[pos] < builder.format.vocab_size
    assert [a.ids[p] for p in a.slots.values()] != [other.ids[p] for p in other.slots.values()]
    # Only the slots differ between draws; the template stays clear.
    assert [i for i, (x, y) in enumerate(zip(a.ids, other.ids)) if x != y] == sorted(a.slots.values())
    assert sorted(set(range(a.width)) - set(a.pinned)) == sorted(a.slots.values())


def test_masked_models_put_the_mask_token_in_every_slot(tokenizer, schema):
    builder = CanvasBuilder(tokenizer, ModelFormat.from_tokenizer(tokenizer, "mask"))
    canvas = builder.build(schema, "x", seed=1)
    assert {canvas.ids[p] for p in canvas.slots.values()} == {tokenizer.mask_token_id}


def test_width_is_the_smallest_multiple_of_16_that_holds_the_reply(builder, schema):
    canvas = builder.build(schema, "x", seed=1)
    span, _ = template_span(canvas, builder.format)
    used = len(builder.format.head_ids) + len(span) + 1
    assert canvas.width % WIDTH_STEP == 0 and canvas.width - WIDTH_STEP < used <= canvas.width


def test_prompt_is_the_chat_template_over_questions_labels_and_state(builder, tokenizer, schema):
    canvas = builder.build(schema, {"subject": "Outage", "body": "Ça ne marche plus"}, seed=1)
    text = tokenizer.decode(canvas.prompt_ids)
    assert text.startswith("<bos><start_of_turn>user\n") and text.endswith("<start_of_turn>model\n")
    for needle in (
        "Question team: Which team should handle it?",
        "B: technical (bugs, outages)",
        "0: calm",
        "tone: <tone>",
        '{"subject": "Outage", "body": "Ça ne marche plus"}',
    ):
        assert needle in text


def test_labels_that_merge_with_the_template_text_are_refused_by_name(builder):
    schema = Schema.from_dict({**TICKETS, "template": "urgent: {urgent}\nteam: {team}bc\ntone: {tone}"})
    with pytest.raises(SchemaError) as err:
        builder.layout(schema)
    assert err.value.question == "team" and err.value.field == "template"
    assert "B" in str(err.value) and "{team}" in str(err.value)


def test_a_template_wider_than_the_served_canvas_is_refused(tokenizer):
    narrow = CanvasBuilder(tokenizer, ModelFormat.from_tokenizer(tokenizer), max_width=16)
    schema = Schema.from_dict(
        {
            **TICKETS,
            "template": "The customer is urgent: {urgent}. Route it to the "
            "team: {team}. Their tone is: {tone} of three.",
        }
    )
    with pytest.raises(SchemaError) as err:
        narrow.layout(schema)
    assert err.value.field == "template" and "holds 16" in str(err.value)


def test_canvas_head_and_turn_close_come_from_the_tokenizer(tokenizer, schema):
    gemma4 = copy.deepcopy(tokenizer)
    gemma4.add_special_tokens({"additional_special_tokens": ["<|channel>", "<channel|>", "<turn|>"]})
    fmt = ModelFormat.from_tokenizer(gemma4)
    open_id, close_id, turn_id = gemma4.convert_tokens_to_ids(["<|channel>", "<channel|>", "<turn|>"])
    assert fmt.head_ids[0] == open_id and fmt.head_ids[-1] == close_id and fmt.turn_close_id == turn_id
    # djev's layout opens the canvas with the thought block; the default ends the prompt with it, as vLLM's
    # DiffusionGemma strategy does (tests/test_thought_block.py)
    canvas = CanvasBuilder(gemma4, fmt, thought="canvas").build(schema, "x", seed=1)
    assert canvas.ids[: len(fmt.head_ids)] == fmt.head_ids
    assert min(canvas.slots.values()) >= len(fmt.head_ids)
    prompted = CanvasBuilder(gemma4, fmt).build(schema, "x", seed=1)
    assert prompted.prompt_ids[-len(fmt.head_ids) :] == fmt.head_ids and open_id not in prompted.ids
    # Gemma 3's vocabulary has no thought block: no head, and <end_of_turn> closes the turn.
    plain = ModelFormat.from_tokenizer(tokenizer)
    assert plain.head_ids == () and plain.turn_close_id == 106
