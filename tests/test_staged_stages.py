"""Staged questions in the schema: depends_on, ask_if and alone are checked across questions (every
mistake a SchemaError naming the question and the field), planned into stages and reads, and a failed
condition gives the skip record {because, was, wanted}."""

import dataclasses

import pytest

from diffjev import Schema, SchemaError
from diffjev.staging import check_stages, model_passes, read_groups, skip_record, skips, stage_levels


def yes_no(qid, **extra):
    return {"id": qid, "type": "yes_no", "instructions": f"Is it {qid}?", **extra}


def choice(qid, options=("billing", "technical"), **extra):
    return {"id": qid, "type": "choice", "instructions": f"Which {qid}?", "options": list(options), **extra}


def schema(*questions):
    return Schema.from_dict({"questions": list(questions)})


def error(*questions) -> SchemaError:
    with pytest.raises(SchemaError) as caught:
        schema(*questions)
    return caught.value


def test_stages_follow_depends_on_and_ask_if_keys():
    s = schema(
        yes_no("urgent"),
        choice("team"),
        yes_no("why", ask_if={"urgent": "yes"}),
        yes_no("refund", depends_on=["team"], ask_if={"why": ["yes", "no"]}),
    )
    assert stage_levels(s.questions) == (("urgent", "team"), ("why",), ("refund",))
    why = s.question("why")
    assert why.ask_if == (("urgent", ("yes",)),) and why.depends_on == ()
    assert s.question("refund").depends_on == ("team",)


def test_alone_questions_take_their_own_read_in_their_stage():
    s = schema(yes_no("a"), yes_no("b", alone=True), yes_no("c"), yes_no("d", depends_on=["a"]))
    assert read_groups(s.questions) == ((("a", "c"), ("b",)), (("d",),))
    assert model_passes(s.questions) == 3
    assert model_passes(schema(yes_no("a"), yes_no("b")).questions) == 1


def test_staging_fields_survive_the_round_trip_in_both_forms():
    s = schema(yes_no("urgent"), choice("team", ask_if={"urgent": "yes"}, depends_on=["urgent"], alone=True))
    assert Schema.from_dict(s.to_dict()) == s
    jev = s.to_jev_questions()
    assert jev["team"]["ask_if"] == {"urgent": ["yes"]} and jev["team"]["alone"] is True
    assert Schema.from_dict({"questions": jev}) == s


@pytest.mark.parametrize(
    "questions, question, field, says",
    [
        ((yes_no("a", depends_on=["nope"]),), "a", "depends_on", "no question has the id 'nope'"),
        ((yes_no("a", ask_if={"ghost": "yes"}),), "a", "ask_if", "no question has the id 'ghost'"),
        ((yes_no("a", depends_on=["a"]),), "a", "depends_on", "its own answer"),
        ((yes_no("a"), yes_no("b", ask_if={"a": "maybe"})), "b", "ask_if", "'maybe' is not an answer of 'a'"),
        ((choice("team"), yes_no("b", ask_if={"team": ["billing", "sales"]})), "b", "ask_if", "billing, technical"),
        ((yes_no("a", depends_on=["b"]), yes_no("b", ask_if={"a": "yes"})), "a", "depends_on", "a -> b -> a"),
        ((yes_no("a", ask_if={"a": "yes"}),), "a", "ask_if", "its own answer"),
        ((yes_no("a", depends_on="b"), yes_no("b")), "a", "depends_on", "list the ids of the questions"),
        ((yes_no("a", ask_if={"b": 3}), yes_no("b")), "a", "ask_if", "answer name or a list"),
        ((yes_no("a", alone="yes"),), "a", "alone", "true or false"),
    ],
)
def test_each_mistake_names_the_question_and_the_field(questions, question, field, says):
    exc = error(*questions)
    assert (exc.question, exc.field) == (question, field)
    assert says in str(exc)


def test_a_longer_cycle_is_named_in_order():
    exc = error(yes_no("a", depends_on=["c"]), yes_no("b", depends_on=["a"]), yes_no("c", depends_on=["b"]))
    assert "a -> c -> b -> a" in str(exc) and exc.question == "a"


def test_waiting_for_a_span_question_is_refused():
    base = schema(yes_no("words"), yes_no("why"))
    span = dataclasses.replace(base.question("words"), kind="span")
    waiting = dataclasses.replace(base.question("why"), depends_on=("words",))
    with pytest.raises(SchemaError) as caught:
        check_stages((span, waiting))
    assert (caught.value.question, caught.value.field) == ("why", "depends_on")
    assert "span question" in str(caught.value)


def test_a_failed_condition_gives_because_was_wanted():
    s = schema(yes_no("urgent"), choice("team"), yes_no("why", ask_if={"urgent": "yes", "team": ["technical"]}))
    why = s.question("why")
    assert skip_record(why, {"urgent": "yes", "team": "technical"}) is None
    assert skip_record(why, {"urgent": "no", "team": "technical"}) == {
        "because": "urgent",
        "was": "no",
        "wanted": ["yes"],
    }
    assert skip_record(why, {"urgent": "yes", "team": "billing"})["because"] == "team"
    assert skip_record(why, {}) == {"because": "urgent", "was": None, "wanted": ["yes"]}


def test_a_skipped_question_counts_as_unanswered_for_the_next_stage():
    s = schema(yes_no("urgent"), yes_no("outage", ask_if={"urgent": "yes"}), yes_no("eta", ask_if={"outage": "yes"}))
    # A stale answer to "outage" (given before "urgent" was corrected to no) must not keep "eta" asked.
    assert skips(s.questions, {"urgent": "no", "outage": "yes"}) == {
        "outage": {"because": "urgent", "was": "no", "wanted": ["yes"]},
        "eta": {"because": "outage", "was": None, "wanted": ["yes"]},
    }
    assert skips(s.questions, {"urgent": "yes", "outage": "yes"}) == {}
