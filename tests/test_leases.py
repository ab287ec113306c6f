"""Leases under real concurrency, on a SQLite file and on PostgreSQL: many annotators claiming from one
queue at once each get an item nobody else holds, and no claim fails."""

import threading
import time
from datetime import timedelta

import pandas as pd
import pytest
from sqlalchemy import func, select

from diffjev import Schema
from diffjev.services import annotation
from diffjev.services.importing import import_items
from storage import repo
from storage.db import Database
from storage.models import Item, Lease, Response, utcnow
from conftest import TICKETS

ANNOTATORS, ITEMS = 12, 300


@pytest.fixture
def db(db_url):
    database = Database(db_url)
    with database.session() as session:
        repo.create_project(session, "p", Schema.from_dict({**TICKETS, "samples": 1}), "owner")
    import_items(database, "p", pd.DataFrame({"text": [f"Ticket {i}" for i in range(ITEMS)]}))
    yield database
    database.dispose()


def run_together(work, names):
    """Run work(name) in one thread per name, all released at once; the errors they raised."""
    start, errors = threading.Barrier(len(names)), []

    def run(name):
        start.wait()
        try:
            work(name)
        except Exception as exc:  # noqa: BLE001 - reported, and the test fails on it
            errors.append(f"{name}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=run, args=(name,)) for name in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    return errors


def overlapping(holds):
    """(item, who, who) for two annotators holding the same item at once."""
    clashes = []
    by_item = {}
    for who, item, start, end in holds:
        by_item.setdefault(item, []).append((start, end, who))
    for item, spans in by_item.items():
        spans.sort()
        clashes += [(item, w1, w2) for (_, e1, w1), (s2, _, w2) in zip(spans, spans[1:]) if s2 < e1 and w1 != w2]
    return clashes


@pytest.mark.timeout(300)
def test_twelve_annotators_draining_one_queue_each_get_items_nobody_else_holds(db):
    holds, lock = [], threading.Lock()

    def annotate(name):
        while (card := annotation.next_card(db, "p", "team", "in_order", name)) is not None:
            shown = time.monotonic()
            annotation.answer(db, card, name, card.question.names[0], seconds=0.1)
            with lock:
                holds.append((name, card.item_id, shown, time.monotonic()))

    errors = run_together(annotate, [f"a{k}" for k in range(ANNOTATORS)])
    assert errors == [], errors[:3]  # no claim failed (PostgreSQL raised UniqueViolation)
    assert overlapping(holds) == []  # no two annotators held one item at once
    with db.read() as session:
        per_item = session.execute(select(Response.item_id, func.count()).group_by(Response.item_id)).all()
    assert len(per_item) == ITEMS and {n for _, n in per_item} == {1}  # each item answered exactly once


def test_one_item_claimed_by_many_at_once_goes_to_exactly_one(db):
    with db.read() as session:
        item = session.scalar(select(Item.id).order_by(Item.id).limit(1))
        _, rows = repo.version_schema(repo.latest_version(session, repo.get_project(session, "p").id))
    won = []

    def claim(name):
        now = utcnow()
        if db.write(lambda s: repo.take_lease(s, item, rows["team"], name, now + timedelta(minutes=10), now)):
            won.append(name)

    names = [f"a{k}" for k in range(16)]
    assert run_together(claim, names) == []
    assert len(won) == 1
    with db.read() as session:
        assert session.scalars(select(Lease.annotator)).all() == won  # the winner's lease stands


def test_an_expired_lease_is_taken_over_and_a_live_one_is_never_removed(db):
    with db.read() as session:
        item = session.scalar(select(Item.id).order_by(Item.id).limit(1))
        _, rows = repo.version_schema(repo.latest_version(session, repo.get_project(session, "p").id))
    now, q = utcnow(), rows["team"]
    assert db.write(lambda s: repo.take_lease(s, item, q, "ann", now + timedelta(minutes=10), now))
    assert not db.write(lambda s: repo.take_lease(s, item, q, "bob", now + timedelta(minutes=10), now))
    later = now + timedelta(minutes=11)  # ann's lease has run out
    assert db.write(lambda s: repo.take_lease(s, item, q, "bob", later + timedelta(minutes=10), later))
    with db.read() as session:
        assert session.scalars(select(Lease.annotator)).all() == ["bob"]


def test_a_claim_fails_on_an_item_someone_held_and_let_go_since_the_pick_began(db):
    # The pick read the item as open and unleased; meanwhile ann leased it and answered it. Taking it
    # then would hand an answered item to a second annotator.
    with db.read() as session:
        item = session.scalar(select(Item.id).order_by(Item.id).limit(1))
        _, rows = repo.version_schema(repo.latest_version(session, repo.get_project(session, "p").id))
    q, bob_picked_at = rows["team"], utcnow()
    assert db.write(lambda s: repo.take_lease(s, item, q, "ann", utcnow() + timedelta(minutes=10), utcnow()))
    db.write(lambda s: repo.release_lease(s, item, q, "ann"))
    assert not db.write(lambda s: repo.take_lease(s, item, q, "bob", utcnow() + timedelta(minutes=10), bob_picked_at))
    # A pick that began after the release may take it.
    assert db.write(lambda s: repo.take_lease(s, item, q, "bob", utcnow() + timedelta(minutes=10), utcnow()))
