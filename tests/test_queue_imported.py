"""The queues of a project imported from Label Studio, where not every task was pre-labeled: a task no model
predicted is answered from the unlabeled queues of both views with nothing chosen, a task only an earlier
model version predicted is offered with that version's suggestion, and an empty queue says where the rest
are in plain words. While a pre-label run is still reading, an item it has not read yet waits for its read."""

import copy
import json
from pathlib import Path

import pytest
from sqlalchemy import select

from diffjev.services import annotation
from diffjev.services.interchange import import_file
from storage import repo
from storage.db import Database
from storage.models import Run

LIVE = Path(__file__).resolve().parent / "data" / "labelstudio" / "live"  # made by Label Studio 1.23.2 itself
BARE_TEXT = "A new ticket arrived after the models ran: the courier left the box in the rain."


def tasks() -> list[dict]:
    """Three tasks of Label Studio's own export, none answered yet: one both model versions predicted, one
    only the first version predicted, and one added after both ran, with no prediction at all."""
    exported = json.loads((LIVE / "ls_export.json").read_text(encoding="utf-8"))
    both, only_v1 = copy.deepcopy(exported[1]), copy.deepcopy(exported[0])
    only_v1["predictions"] = [p for p in only_v1["predictions"] if p["model_version"] == "baseline-v1"]
    bare = copy.deepcopy(exported[2])
    bare.update(id=100, data={"text": BARE_TEXT, "ticket": "T-200"}, predictions=[])
    for task in (both, bare, only_v1):
        task["annotations"] = []
    return [both, bare, only_v1]


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "export.json"
    path.write_text(json.dumps(tasks()), encoding="utf-8")
    database = Database(tmp_path / "imported.db")
    import_file(database, "tickets", "labelstudio", path, "owner", config=LIVE / "label_config.xml")
    return database


def model_of(db, card_suggestion) -> str | None:
    """The model version whose run made a card's suggestion (None: the card shows no suggestion)."""
    if card_suggestion is None:
        return None
    with db.read() as session:
        return session.scalar(select(Run.model_version).where(Run.id == card_suggestion["run"]))


def one_question_queue(db, strategy: str, annotator: str = "ann") -> list[tuple[str, str | None]]:
    """(task id, model version of the suggestion shown) of each card the queue serves, answering each."""
    served = []
    while (card := annotation.next_card(db, "tickets", "sentiment", strategy, annotator)) is not None:
        served.append((card.external_id, model_of(db, card.suggestion)))
        annotation.answer(db, card, annotator, "negative", seconds=1.0)
    return served


def test_the_one_question_queue_in_order_serves_the_unpredicted_task_with_nothing_chosen(db):
    # the read items in item order, then the unread one: it is looked for only once the read ones are answered
    assert one_question_queue(db, "in_order") == [("7", "tuned-v2"), ("6", "baseline-v1"), ("100", None)]
    reason = annotation.empty_queue_reason(db, "tickets", "sentiment", "in_order", "ann")
    assert reason.startswith("Every item has an answer to sentiment"), reason


def test_a_model_ordered_queue_serves_the_predicted_tasks_and_names_the_unpredicted_one(db):
    # the least sure first: the first version was less sure of task 6 than the second of task 7
    assert one_question_queue(db, "least_confidence") == [("6", "baseline-v1"), ("7", "tuned-v2")]
    reason = annotation.empty_queue_reason(db, "tickets", "sentiment", "least_confidence", "ann")
    assert "Of the 1 item without an answer to sentiment, 1 has no suggestion from any run" in reason, reason
    assert "'Unlabeled, in order'" in reason and "1 items" not in reason and "latest run" not in reason


def pick(question) -> str:
    """An answer a person would give: no span marked, or the first answer name."""
    return "none" if annotation.is_span_question(question) else question.names[0]


def test_the_item_view_in_order_serves_the_unpredicted_task_with_nothing_chosen(db):
    served = []
    while (card := annotation.next_item_card(db, "tickets", "in_order", "ann")) is not None:
        chosen = {e.question.id: e.preselected for e in card.asked}
        served.append((card.external_id, {model_of(db, e.suggestion) for e in card.asked}))
        if card.external_id == "100":
            assert set(chosen.values()) == {None}  # nothing chosen: the annotator picks every answer
            with pytest.raises(annotation.MissingAnswer):
                annotation.accept_item(db, card, "ann", {}, seconds=1.0)
            chosen = {e.question.id: pick(e.question) for e in card.asked}
        annotation.accept_item(db, card, "ann", chosen, seconds=1.0)
    assert served == [("7", {"tuned-v2"}), ("6", {"baseline-v1"}), ("100", {None})]
    assert annotation.empty_item_queue_reason(db, "tickets", "in_order", "ann").startswith("Every item has an answer")


def test_the_item_views_model_ordered_queue_names_the_unpredicted_task(db):
    served = []
    while (card := annotation.next_item_card(db, "tickets", "least_confidence", "ann")) is not None:
        served.append(card.external_id)
        annotation.accept_item(db, card, "ann", {e.question.id: e.preselected for e in card.asked}, seconds=1.0)
    assert sorted(served) == ["6", "7"]
    reason = annotation.empty_item_queue_reason(db, "tickets", "least_confidence", "ann")
    assert "Of the 1 item without an answer to sentiment, 1 has no suggestion from any run" in reason, reason


def test_while_a_run_is_reading_the_unread_task_waits_for_its_read(db):
    with db.session() as session:
        project = repo.get_project(session, "tickets")
        run = repo.create_run(session, project.id, repo.latest_version(session, project.id), "t", "m", None, {}, "o")
        run_id = run.id
    assert one_question_queue(db, "in_order") == [("7", "tuned-v2"), ("6", "baseline-v1")]
    following = annotation.next_item_card(db, "tickets", "in_order", "bob")  # 7's other questions are open
    assert following.external_id == "7"
    reason = annotation.empty_queue_reason(db, "tickets", "sentiment", "in_order", "ann")
    assert "Pre-labels are still being read" in reason, reason
    with db.session() as session:
        repo.finish_run(session, run_id, "cancelled", None, "owner")
    assert one_question_queue(db, "in_order") == [("100", None)]


def test_a_picked_runs_queue_holds_its_reads_and_names_the_rest(db):
    with db.read() as session:
        tuned = session.scalar(select(Run.id).where(Run.model_version == "tuned-v2"))
    card = annotation.next_card(db, "tickets", "sentiment", "in_order", "ann", run=tuned)
    assert (card.external_id, model_of(db, card.suggestion)) == ("7", "tuned-v2")
    annotation.answer(db, card, "ann", "negative", seconds=1.0)
    assert annotation.next_card(db, "tickets", "sentiment", "in_order", "ann", run=tuned) is None
    reason = annotation.empty_queue_reason(db, "tickets", "sentiment", "in_order", "ann", run=tuned)
    assert f"Of the 2 items without an answer to sentiment, 2 have no suggestion from run #{tuned}" in reason, reason
    assert "'Latest reads per item'" in reason
