"""The question-type registry: each kind's behaviour in one place, and the staging fields every kind takes."""

import pytest

from diffjev.decide import Answer
from diffjev.errors import SchemaError
from diffjev.question_types import QUESTION_TYPES, question_type
from diffjev.schema import Schema


def schema(*questions):
    return Schema.from_dict({"questions": list(questions)})


def test_names_and_aliases_find_their_type():
    assert question_type("noul") is QUESTION_TYPES["yes_no"]
    assert question_type("boolean") is QUESTION_TYPES["yes_no"]
    assert question_type("choice").answers_field == "options"
    assert question_type("score").ordinal and not question_type("choice").ordinal
    assert question_type("rating") is None


def test_a_question_knows_its_type_and_its_type_shapes_its_answer():
    s = schema({"id": "tone", "type": "score", "instructions": "How upset?", "levels": ["calm", "annoyed", "furious"]})
    q = s.question("tone")
    assert q.type is QUESTION_TYPES["score"]
    assert q.labels == ("0", "1", "2")
    answer = Answer("tone", "score", "annoyed", {"calm": 0.2, "annoyed": 0.5, "furious": 0.3}, 0.5, 1.0, 0.2, 1.0, 1)
    assert answer.value == pytest.approx(0.5 * 1 + 0.3 * 2)
    shape = answer.to_jev(q)
    assert shape["legend"] == {"0": "calm", "1": "annoyed", "2": "furious"}
    assert q.type.jev_probabilities(q, shape) == [0.2, 0.5, 0.3]


def test_staging_fields_round_trip_through_both_forms():
    s = schema(
        {"id": "urgent", "type": "yes_no", "instructions": "Urgent?"},
        {
            "id": "why",
            "type": "choice",
            "instructions": "Why?",
            "options": ["outage", "deadline"],
            "depends_on": ["urgent"],
            "ask_if": {"urgent": "yes"},
            "alone": True,
        },
    )
    why = s.question("why")
    assert why.depends_on == ("urgent",)
    assert why.conditions == {"urgent": ("yes",)}
    assert why.alone
    assert Schema.from_dict(s.to_dict()) == s
    jev = s.to_jev_questions()["why"]
    assert jev["ask_if"] == {"urgent": ["yes"]} and jev["depends_on"] == ["urgent"] and jev["alone"] is True
    assert Schema.from_dict({"questions": s.to_jev_questions()}) == s


@pytest.mark.parametrize(
    "extra, field",
    [
        ({"depends_on": "urgent"}, "depends_on"),
        ({"depends_on": [""]}, "depends_on"),
        ({"ask_if": ["urgent"]}, "ask_if"),
        ({"ask_if": {"urgent": []}}, "ask_if"),
        ({"ask_if": {"urgent": 1}}, "ask_if"),
        ({"alone": "yes"}, "alone"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_a_staging_field_of_the_wrong_shape_names_the_question_and_field(extra, field):
    with pytest.raises(SchemaError) as err:
        schema(
            {"id": "urgent", "type": "yes_no", "instructions": "Urgent?"},
            {"id": "why", "type": "yes_no", "instructions": "Outage?", **extra},
        )
    assert err.value.question == "why" and err.value.field == field


def test_the_unknown_kind_message_lists_every_registered_kind():
    with pytest.raises(SchemaError) as err:
        schema({"id": "q", "type": "rating", "instructions": "?"})
    for name in QUESTION_TYPES:
        assert name in str(err.value)


def test_a_span_list_too_long_for_the_answer_column_is_refused_not_cut():
    s = schema({"id": "parts", "type": "spans", "instructions": "Which parts are named?"})
    q = s.question("parts")
    text = "ab " * 200
    few = ",".join(f"{3 * i}-{3 * i + 2}" for i in range(5))
    assert q.type.human_value(q, few, text) == few
    many = ",".join(f"{3 * i}-{3 * i + 2}" for i in range(120))
    with pytest.raises(ValueError, match="120 spans are more than one answer holds"):
        q.type.human_value(q, many, text)


def test_every_registered_kind_has_a_widget_in_the_item_view():
    from diffjev.ui.item_view import WIDGETS

    assert {"span", "spans"} <= set(QUESTION_TYPES)
    for name, question_type_ in QUESTION_TYPES.items():
        assert question_type_.widget in WIDGETS, name
