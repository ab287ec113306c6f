"""Many annotators at once against one studio and one database (a SQLite file, and PostgreSQL): 20
gradio_client annotators, each with its own login, 25 accept or correct actions each. The loop is
bounded: it stops by itself.

The race this guards (two annotators claiming one item) needs annotators picking at once, not many
actions each: at this scale a claim that takes over a live lease (ON CONFLICT DO UPDATE with no
condition) failed it on PostgreSQL, two annotators answering one item (484 items for 500 actions). The
full scale, 200 actions each, is benchmarks/many_annotators.py (--actions 200)."""

import sys
import time
from pathlib import Path

import pytest
from sqlalchemy import func, select

from storage.models import Event, Response
from studio_fixtures import serve_studio, studio_db

sys.path.insert(0, str(Path(__file__).parent.parent / "benchmarks"))
from many_annotators import simulate  # noqa: E402  (the benchmark's annotators, shared)

ANNOTATORS, ACTIONS = 20, 25


@pytest.mark.timeout(1200)
def test_twenty_annotators_at_once_store_every_action_once_and_never_share_an_item(db_url, dgemma_engine):
    items = ANNOTATORS * ACTIONS + 100
    db = studio_db(db_url, [f"Ticket {i}: the export stopped working" for i in range(items)], dgemma_engine)
    users = [(f"annotator{k}", f"secret-{k}") for k in range(ANNOTATORS)]
    server, _ = serve_studio(db, dgemma_engine, auth=users)
    started = time.monotonic()
    with server:
        done = simulate(server.url, users, ACTIONS)
    print(
        f"\n{ANNOTATORS} annotators × {ACTIONS} actions in {time.monotonic() - started:.0f} s: p50 "
        f"{done.percentile_ms(0.5):.0f} ms, p95 {done.percentile_ms(0.95):.0f} ms per action (studio and "
        f"clients in one process)"
    )
    assert done.errors == [], done.errors[:5]  # no request failed
    assert done.actions == {user: ACTIONS for user, _ in users}
    assert done.overlapping_holds() == []  # no two annotators held the same item at once
    with db.read() as session:
        per_annotator = dict(
            session.execute(select(Response.annotator, func.count()).group_by(Response.annotator)).all()
        )
        pairs = session.scalar(
            select(func.count()).select_from(select(Response.item_id, Response.question_id).distinct().subquery())
        )
        events = session.scalar(select(func.count()).select_from(Event).where(Event.kind == "response.submitted"))
        sources = dict(session.execute(select(Response.source, func.count()).group_by(Response.source)).all())
    assert per_annotator == {user: ACTIONS for user, _ in users}  # every action stored exactly once
    assert pairs == ANNOTATORS * ACTIONS and events == ANNOTATORS * ACTIONS
    assert sum(sources.values()) == ANNOTATORS * ACTIONS and sources.get("accepted", 0) >= ANNOTATORS * ACTIONS // 2
