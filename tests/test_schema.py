"""Schema and template parsing: valid forms, and every invalid form raising SchemaError that names the
question and the field and says how to fix it."""

import pytest

from diffjev import Schema, SchemaError, Template
from conftest import TICKETS


def q(**spec):
    return {"id": "q", "type": "choice", "instructions": "Pick one.", "options": ["a", "b"], **spec}


def test_native_form_reads_kinds_labels_and_descriptions():
    s = Schema.from_dict(TICKETS)
    urgent, team, tone = s.questions
    assert (urgent.kind, urgent.names, urgent.labels) == ("yes_no", ("yes", "no"), ("yes", "no"))
    assert (team.names, team.labels) == (("billing", "technical", "account"), ("A", "B", "C"))
    assert team.alternatives[1].description == "bugs, outages"
    assert (tone.kind, tone.labels) == ("score", ("0", "1", "2"))
    assert s.instructions == "Support tickets from a SaaS product."
    assert s.template.text == "urgent: {urgent}\nteam: {team}\ntone: {tone}"
    assert s.sampling.samples == "auto" and s.sampling.auto_threshold == 0.1 and s.sampling.auto_max == 4


def test_jev_form_and_aliases_give_the_same_questions():
    jev = Schema.from_dict(
        {
            "instructions": TICKETS["instructions"],
            "questions": {
                "urgent": {"type": "noul", "instructions": "Does the customer need a reply within the hour?"},
                "team": {
                    "type": "choice",
                    "instructions": "Which team should handle it?",
                    "criteria": {"billing": None, "technical": "bugs, outages", "account": None},
                },
                "tone": {
                    "type": "score",
                    "instructions": "How upset is the customer?",
                    "criteria": ["calm", "annoyed", "furious"],
                },
            },
        }
    )
    assert jev == Schema.from_dict(TICKETS)
    for alias in ("noul", "bool", "boolean", "yes_no"):
        s = Schema.from_dict({"questions": [{"id": "x", "type": alias, "instructions": "?"}]})
        assert s.questions[0].kind == "yes_no"


def test_round_trips_through_dict_and_jev_questions():
    s = Schema.from_dict({**TICKETS, "template": "Urgent: {urgent}\nTeam: {team}\nTone: {tone}/3", "samples": 3})
    assert Schema.from_dict(s.to_dict()) == s
    assert Schema.from_dict({"questions": s.to_jev_questions(), "instructions": s.instructions}) == Schema.from_dict(
        {**TICKETS}
    )


def test_score_beyond_ten_levels_uses_letters():
    s = Schema.from_dict(
        {"questions": [{"id": "stars", "type": "score", "instructions": "?", "levels": [f"l{i}" for i in range(12)]}]}
    )
    assert s.questions[0].labels[:3] == ("A", "B", "C") and len(s.questions[0].labels) == 12


@pytest.mark.parametrize(
    "spec, question, field, hint",
    [
        ({"questions": [q(id="")]}, None, "id", "empty id"),
        ({"questions": [q(id="a"), q(id="a")]}, "a", "id", "used twice"),
        ({"questions": [q(id="a:b")]}, "a:b", "id", "cannot contain ':'"),
        ({"questions": [q(id="a\nb")]}, "a\nb", "id", "line break"),
        ({"questions": [q(options=["only"])]}, "q", "options", "at least 2"),
        ({"questions": [q(options=[f"o{i}" for i in range(27)])]}, "q", "options", "at most 26"),
        ({"questions": [q(type="rating")]}, "q", "type", "unknown kind"),
        ({"questions": [q(options=["a", "a"])]}, "q", "options", "appears twice"),
        ({"questions": [q(instructions="")]}, "q", "instructions", "say what to decide"),
        ({"questions": [q(colour="red")]}, "q", "colour", "unknown field"),
        ({"questions": [q()], "template": "q: {q}\nother: {other}"}, "other", "template", "no question has that id"),
        ({"questions": [q(), q(id="r")], "template": "q: {q}"}, "r", "template", "no slot"),
        ({"questions": [q()], "template": "q: {q} {q}"}, "q", "template", "appears twice"),
        ({"questions": [q()], "template": "q: {}"}, None, "template", "no question id"),
        ({"questions": [q()], "template": "q: {q"}, None, "template", "literal brace"),
        ({"questions": [q()], "samples": 0}, None, "samples", "from 1 to 32"),
        ({"questions": [q()], "samples": "many"}, None, "samples", "auto"),
        ({"questions": [q()], "auto_max": 99}, None, "auto_max", "from 1 to 32"),
        ({"questions": []}, None, "questions", "at least one"),
        ({"questions": "urgent"}, None, "questions", "list"),
        ({"questions": [q()], "colour": 1}, None, "colour", "unknown schema field"),
        (
            {"questions": [{"id": "y", "type": "yes_no", "instructions": "?", "options": ["a", "b"]}]},
            "y",
            "options",
            "criteria",
        ),
    ],
)
def test_every_invalid_schema_names_question_field_and_fix(spec, question, field, hint):
    with pytest.raises(SchemaError) as err:
        Schema.from_dict(spec)
    assert err.value.question == question
    assert err.value.field == field
    assert hint in str(err.value)
    if question is not None:
        assert repr(question) in str(err.value)


def test_template_parsing_keeps_literal_braces_and_renders():
    t = Template.parse("{{json}} Urgent: {urgent}\nTone: {tone}/3")
    assert t.slots == ("urgent", "tone")
    assert t.render({"urgent": "yes", "tone": "2"}) == "{json} Urgent: yes\nTone: 2/3"
    assert t.display() == "{json} Urgent: <urgent>\nTone: <tone>/3"
    assert Template.default(["a", "b"]).text == "a: {a}\nb: {b}"


@pytest.mark.parametrize(
    "spec, field, hint",
    [
        ({"questions": [{"id": "q", "type": "choice", "instructions": "?"}]}, "options", '["billing", "technical"]'),
        ({"questions": [{"id": "q", "type": "score", "instructions": "?"}]}, "levels", '["calm", "annoyed"'),
        ({"questions": {"q": {"type": "choice", "instructions": "?"}}}, "criteria", "list the options"),
        ({"questions": [{"id": "q", "type": "noul", "instructions": "?", "criteria": ["a"]}]}, "criteria", "noul"),
    ],
)
def test_a_missing_answer_list_is_named_as_the_form_in_use_names_it(spec, field, hint):
    with pytest.raises(SchemaError) as err:
        Schema.from_dict(spec)
    assert err.value.field == field and hint in str(err.value), str(err.value)


def test_an_unknown_kind_says_what_noul_means():
    with pytest.raises(SchemaError) as err:
        Schema.from_dict({"questions": [q(type="rating")]})
    assert "noul is the Jev API's name for yes_no: a yes/no question" in str(err.value)
