"""The annotation service: leases, queues, answers, stale writes and undo, on a real SQLite file."""

import threading

import pandas as pd
import pytest
from sqlalchemy import select

from diffjev import Schema
from diffjev.services import annotation
from diffjev.services.importing import import_items
from diffjev.services.prelabel import prelabel
from storage import repo
from storage.db import Database
from storage.models import ItemRead, Response, Suggestion
from conftest import TICKETS


@pytest.fixture
def db(tmp_path, dgemma_engine):
    database = Database(tmp_path / "annotate.db")
    with database.session() as session:
        repo.create_project(session, "p", Schema.from_dict({**TICKETS, "samples": 1}), "owner")
    import_items(database, "p", pd.DataFrame({"text": [f"Ticket {i}" for i in range(12)]}))
    prelabel(database, "p", dgemma_engine)
    return database


def test_two_annotators_never_hold_the_same_item(db):
    held = {}
    errors = []

    def work(name):
        try:
            held[name] = [annotation.next_card(db, "p", "team", "least_confidence", name).item_id for _ in range(3)]
        except Exception as exc:  # noqa: BLE001
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=(f"a{k}",)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    # Each annotator holds one lease at a time (the last card); the four last cards all differ.
    last = [ids[-1] for ids in held.values()]
    assert len(set(last)) == 4


def test_least_confidence_queue_serves_the_least_sure_first_and_answers_close_it(db):
    card = annotation.next_card(db, "p", "team", "least_confidence", "ann")
    with db.read() as session:
        lowest = session.scalar(
            select(Suggestion.item_id)
            .where(Suggestion.question_id == card.question_row)
            .order_by(Suggestion.confidence, Suggestion.item_id)
            .limit(1)
        )
    assert card.item_id == lowest and card.suggestion is not None and card.question.id == "team"
    annotation.answer(db, card, "ann", card.suggestion["answer"], seconds=1.5)
    other = next(n for n in card.question.names if n != card.suggestion["answer"])
    second = annotation.next_card(db, "p", "team", "least_confidence", "ann")
    assert second.item_id != card.item_id
    annotation.answer(db, second, "ann", other, seconds=2.0)
    with db.read() as session:
        rows = session.scalars(select(Response).order_by(Response.id)).all()
    assert [(r.source, r.suggestion_shown, r.seconds) for r in rows] == [
        ("accepted", True, 1.5),
        ("corrected", True, 2.0),
    ]
    assert annotation.progress(db, card.project_id, card.question_row) == (2, 12)


def test_blind_slice_hides_the_suggestion_and_records_it_unseen(db):
    card = annotation.next_card(db, "p", "urgent", "blind", "ann")
    assert card.blind and card.suggestion is None
    annotation.answer(db, card, "ann", "yes", seconds=3.0)
    with db.read() as session:
        row = session.scalar(select(Response))
    assert (row.source, row.suggestion_shown, row.suggestion_id) == ("manual", False, None)


def test_undo_takes_back_answers_in_reverse_order(db):
    first = annotation.next_card(db, "p", "tone", "in_order", "ann")
    annotation.answer(db, first, "ann", "calm", seconds=1.0)
    second = annotation.next_card(db, "p", "tone", "in_order", "ann")
    annotation.answer(db, second, "ann", "furious", seconds=1.0)
    assert annotation.undo_last(db, first.project_id, "ann") == (second.item_id, second.question_row)
    assert annotation.undo_last(db, first.project_id, "ann") == (first.item_id, first.question_row)
    assert annotation.undo_last(db, first.project_id, "ann") is None
    with db.read() as session:
        assert session.scalars(select(Response)).all() == []
        kinds = session.scalars(select(repo.Event.kind).where(repo.Event.actor == "ann")).all()
    assert kinds.count("response.undone") == 2
    again = annotation.next_card(db, "p", "tone", "in_order", "ann")
    assert again.item_id == first.item_id  # back in the queue


def test_a_stale_card_cannot_overwrite_a_newer_answer(db):
    card = annotation.next_card(db, "p", "team", "in_order", "ann")
    annotation.answer(db, card, "ann", "billing", seconds=1.0)
    fresh = annotation.load_card(db, card.project_id, card.item_id, card.question, card.question_row, None, "ann")
    annotation.answer(db, fresh, "ann", "account", seconds=1.0)
    with pytest.raises(repo.StaleWrite):
        annotation.answer(db, fresh, "ann", "technical", seconds=1.0)  # loaded before the last change
    with pytest.raises(ValueError, match="not an answer"):
        annotation.answer(db, card, "ann", "sales", seconds=1.0)


def crafted(tmp_path, texts, runs):
    """A project whose runs hold crafted suggestions: runs is a list of {item index: (answer, confidence, stderr)}."""
    from sqlalchemy import insert

    from storage.models import Item, utcnow

    db = Database(tmp_path / "crafted.db")
    with db.session() as session:
        project = repo.create_project(session, "c", Schema.from_dict({**TICKETS, "samples": 1}), "owner")
        version = repo.latest_version(session, project.id)
        _, rows = repo.version_schema(version)
        session.execute(
            insert(Item),
            [
                {
                    "project_id": project.id,
                    "external_id": None,
                    "content_hash": str(i),
                    "text": t,
                    "fields": {},
                    "created_at": utcnow(),
                }
                for i, t in enumerate(texts)
            ],
        )
        items = list(session.scalars(select(Item.id).order_by(Item.id)))
        run_ids = []
        for spec in runs:
            run_id = repo.create_run(session, project.id, version, "crafted", "m", None, {}, "owner").id
            run_ids.append(run_id)
            for index, (answer, confidence, stderr) in spec.items():
                session.add(
                    Suggestion(
                        run_id=run_id,
                        item_id=items[index],
                        question_id=rows["team"],
                        answer=answer,
                        distribution={"billing": 0.3, "technical": 0.3, "account": 0.4},
                        confidence=confidence,
                        full_vocab_confidence=confidence,
                        entropy=1.0,
                        margin=0.1,
                        label_mass=1.0,
                        stderr=stderr,
                        agreement=None,
                        draws=4,
                        value=None,
                        latency_ms=1.0,
                    )
                )
                # a suggestion is stored with its item's read, as a run stores it
                session.add(ItemRead(run_id=run_id, item_id=items[index], status="ok"))
    return db, items, run_ids


def ids(card):
    return None if card is None else card.item_id


def test_stderr_queue_serves_the_most_unstable_first(tmp_path):
    db, items, _ = crafted(
        tmp_path, ["a", "b", "c"], [{0: ("billing", 0.5, 0.01), 1: ("billing", 0.9, 0.2), 2: ("billing", 0.4, None)}]
    )
    assert ids(annotation.next_card(db, "c", "team", "stderr", "ann")) == items[1]


def test_run_disagreement_queue(tmp_path):
    db, items, _ = crafted(
        tmp_path,
        ["a", "b", "c"],
        [
            {0: ("billing", 0.5, None), 1: ("billing", 0.5, None), 2: ("account", 0.5, None)},
            {0: ("billing", 0.6, None), 1: ("technical", 0.9, None), 2: ("technical", 0.4, None)},
        ],
    )
    first = annotation.next_card(db, "c", "team", "run_disagreement", "ann")
    assert first.item_id == items[2]  # the least confident of the two that changed
    annotation.answer(db, first, "ann", "account", seconds=1.0)
    assert ids(annotation.next_card(db, "c", "team", "run_disagreement", "ann")) == items[1]


def test_second_opinion_goes_to_another_annotator_where_model_and_first_human_disagree(tmp_path):
    db, items, _ = crafted(tmp_path, ["a", "b"], [{0: ("billing", 0.5, None), 1: ("billing", 0.5, None)}])
    card = annotation.next_card(db, "c", "team", "in_order", "alice")
    annotation.answer(db, card, "alice", "account", seconds=1.0)  # disagrees with the model
    assert annotation.next_card(db, "c", "team", "second_opinion", "alice") is None
    assert ids(annotation.next_card(db, "c", "team", "second_opinion", "bob")) == card.item_id


def test_changed_queue_after_a_new_run(tmp_path):
    db, items, _ = crafted(tmp_path, ["a", "b"], [{0: ("billing", 0.5, None), 1: ("billing", 0.5, None)}])
    for _ in range(2):
        card = annotation.next_card(db, "c", "team", "in_order", "ann")
        annotation.answer(db, card, "ann", "billing", seconds=1.0)
    with db.session() as session:  # a new run: item 0 now reads "technical", item 1 is unchanged
        project = repo.get_project(session, "c")
        version = repo.latest_version(session, project.id)
        _, rows = repo.version_schema(version)
        run = repo.create_run(session, project.id, version, "crafted", "m", None, {}, "owner")
        for index, answer in ((0, "technical"), (1, "billing")):
            session.add(
                Suggestion(
                    run_id=run.id,
                    item_id=items[index],
                    question_id=rows["team"],
                    answer=answer,
                    distribution={"billing": 0.5, "technical": 0.5, "account": 0.0},
                    confidence=0.5,
                    full_vocab_confidence=0.5,
                    entropy=0.7,
                    margin=0.0,
                    label_mass=1.0,
                    stderr=None,
                    agreement=None,
                    draws=1,
                    value=None,
                    latency_ms=1.0,
                    is_open=False,
                )
            )
            session.add(ItemRead(run_id=run.id, item_id=items[index], status="ok"))  # stored with its read
    again = annotation.next_card(db, "c", "team", "changed", "ann")
    assert again.item_id == items[0] and again.suggestion["answer"] == "technical"
    annotation.answer(db, again, "ann", "technical", seconds=1.0)
    assert annotation.next_card(db, "c", "team", "changed", "ann") is None


def test_diverse_queue_moves_to_another_topic_after_each_answer(tmp_path):
    families = [
        "Refund for invoice {} please, I was charged twice",
        "The dashboard is down again since {} this morning",
        "How do I add {} more seats to our team plan",
    ]
    texts = (
        [families[0].format(i) for i in range(6)]
        + [families[1].format(i) for i in range(3)]
        + [families[2].format(i) for i in range(3)]
    )
    # the refund family is the least confident of all: pure uncertainty would serve it six times in a row
    spec = {i: ("billing", 0.30 + 0.01 * i, None) for i in range(6)}
    spec.update({i: ("technical", 0.60 + 0.01 * i, None) for i in range(6, 12)})
    db, items, _ = crafted(tmp_path, texts, [spec])
    served = []
    for _ in range(3):
        card = annotation.next_card(db, "c", "team", "diverse", "ann")
        served.append(items.index(card.item_id))
        annotation.answer(db, card, "ann", "billing", seconds=1.0)
    family = [0] * 6 + [1] * 3 + [2] * 3
    assert served[0] == 0  # the most uncertain first
    assert sorted(family[i] for i in served) == [0, 1, 2]  # then one from each other topic


def test_agreement_between_annotators(tmp_path):
    from diffjev.services import review

    db, items, _ = crafted(tmp_path, ["a", "b", "c", "d"], [{i: ("billing", 0.5, None) for i in range(4)}])
    with db.session() as session:
        rows = repo.version_schema(repo.latest_version(session, repo.get_project(session, "c").id))[1]
        for who, values in (
            ("alice", ["billing", "billing", "account", "technical"]),
            ("bob", ["billing", "account", "account", "technical"]),
        ):
            for item, value in zip(items, values):
                repo.respond(session, repo.ResponseInput(item, rows["team"], who, value, "manual"))
    table, differing = review.agreement(db, "c")
    assert table == [
        {
            "question": "team",
            "annotators": "alice / bob",
            "items": 4,
            "agreement": 0.75,
            "kappa": round(0.4375 / 0.6875, 3),
        }
    ]
    # kappa by hand: p_o = 3/4; alice (2 billing, 1 account, 1 technical), bob (1, 2, 1) over 4:
    # p_e = (2*1 + 1*2 + 1*1) / 16 = 5/16; (0.75 - 0.3125) / (1 - 0.3125) = 0.63636
    # items are named as their cards show them: these have no id of their own, so their number, as text
    assert differing == [{"item": str(items[1]), "question": "team", "alice": "billing", "bob": "account"}]


def test_overlap_queue_sends_the_share_to_a_second_annotator(tmp_path, monkeypatch):
    db, items, _ = crafted(tmp_path, [f"t{i}" for i in range(40)], [{i: ("billing", 0.5, None) for i in range(40)}])
    for _ in range(40):
        card = annotation.next_card(db, "c", "team", "in_order", "alice")
        annotation.answer(db, card, "alice", "billing", seconds=1.0)
    monkeypatch.setenv("DIFFJEV_OVERLAP", "25")
    share = [i for i in items if (i * 7919) % 100 < 25]
    served = []
    while (card := annotation.next_card(db, "c", "team", "overlap", "bob")) is not None:
        served.append(card.item_id)
        annotation.answer(db, card, "bob", "billing", seconds=1.0)
    assert served == share and 0 < len(share) < 40
    assert annotation.next_card(db, "c", "team", "overlap", "alice") is None  # never her own items again
    monkeypatch.setenv("DIFFJEV_OVERLAP", "lots")
    with pytest.raises(ValueError, match="DIFFJEV_OVERLAP"):
        annotation.next_card(db, "c", "team", "overlap", "carol")
