"""A project holding everything an interchange format must carry, made the way the studio makes it: a
real SQLite file, a pre-label run of the tiny DiffusionGemma (real distributions, real model skips and
spans), and two annotators answering through the item view's service (a staged question not asked, a
skipped item, corrected and span answers). Round-trip tests of every format start from it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from diffjev import Schema
from diffjev.formats.bundle import Bundle
from diffjev.services import adjudication, annotation
from diffjev.services.importing import import_items
from diffjev.services.prelabel import prelabel
from storage import repo
from storage.db import Database

DATA = Path(__file__).parent / "data"
SCHEMA = {
    "questions": [
        {"id": "urgent", "type": "yes_no", "instructions": "Does the customer need a reply within the hour?"},
        {"id": "outage", "type": "yes_no", "instructions": "Is it an outage?", "ask_if": {"urgent": "yes"}},
        {"id": "calm", "type": "yes_no", "instructions": "Is the customer calm?", "ask_if": {"urgent": "no"}},
        {
            "id": "team",
            "type": "choice",
            "instructions": "Which team should answer?",
            "options": ["billing", "tech", "sales"],
        },
        {"id": "tone", "type": "score", "instructions": "How angry is the customer?", "levels": ["1", "2", "3"]},
        {"id": "product", "type": "span", "instructions": "Which words name the product?"},
        {"id": "parts", "type": "spans", "instructions": "Which parts are broken?", "max_items": 2},
    ],
    "samples": 1,
}
TEXTS = [
    "The Acme Phone X arrived with a broken screen and a bent hinge. Fix it now!",
    "Charged twice for the Pro plan 🙂 — please refund one.",
    "Line one\r\nThe Cafe\u0301 Deluxe kettle: lid cracked, handle loose.",
]


def full_project(path, engine, name: str = "tickets") -> Database:
    db = Database(path)
    with db.session() as session:
        repo.create_project(session, name, Schema.from_dict(SCHEMA), "owner")
    frame = pd.DataFrame({"id": ["t1", "t2", "t3"], "text": TEXTS, "channel": ["mail", "chat", "mail"]})
    import_items(db, name, frame, id_field="id", context_fields=["channel"])
    prelabel(db, name, engine)
    first = annotation.next_item_card(db, name, "in_order", "alice")
    text = TEXTS[0]
    phone = text.index("Acme Phone X")
    screen, hinge = text.index("screen"), text.index("hinge")
    annotation.accept_item(
        db,
        first,
        "alice",
        {
            "urgent": "yes",
            "outage": "no",
            "team": "tech",
            "tone": "3",
            "product": f"{phone}-{phone + len('Acme Phone X')}",
            "parts": f"{screen}-{screen + len('screen')},{hinge}-{hinge + len('hinge')}",
        },
        seconds=4.5,
    )
    second = annotation.next_item_card(db, name, "in_order", "alice")
    annotation.accept_item(
        db,
        second,
        "alice",
        {"urgent": "no", "calm": "yes", "team": "billing", "tone": "1", "product": "none", "parts": "none"},
        seconds=2.0,
    )
    # bob answers the first item too, differently, and leaves it there
    project_id, schema, rows, _ = annotation.project_schema(db, name)
    again = annotation.load_item_card(db, project_id, first.item_id, schema, rows, None, "bob")
    annotation.accept_item(
        db,
        again,
        "bob",
        {"urgent": "no", "calm": "no", "team": "billing", "tone": "2", "product": "none", "parts": "none"},
        seconds=3.0,
    )
    # dave, a reviewer, settles the first item's team (alice said tech, bob billing) with a comment
    adjudication.adjudicate(db, name, "t1", "team", "tech", "dave", "the hinge is hardware <b>not</b> billing")
    # carol skips the third item
    third = annotation.next_item_card(db, name, "in_order", "carol")
    while third.text != TEXTS[2]:
        annotation.skip_item(db, third, "carol", None)  # not the third: still skipped, which is what we want
        third = annotation.next_item_card(db, name, "in_order", "carol")
    annotation.skip_item(db, third, "carol", 1.0)
    return db


def comparable(bundle: Bundle) -> dict:
    """What a round trip must keep, in a form that compares equal: per item (by external id), its text and
    fields, every annotator's answers (value, status, source, spans, skip record), and per run (by position:
    run keys change between tools) each model answer's name, distribution (to 6 places), confidence and spans,
    and the model's skips."""

    def rounded(distribution: dict) -> dict:
        return {name: round(p, 6) for name, p in distribution.items()}

    def marks(spans) -> list | None:
        return None if spans is None else [(s.start, s.end, s.text) for s in spans]

    order = list(bundle.runs)
    out = {}
    for record in bundle.records:
        out[record.external_id] = {
            "text": record.text,
            "fields": record.fields,
            "answers": sorted(
                (a.annotator, a.question, a.value, a.status, a.source, str(marks(a.spans)), str(a.skipped))
                for a in record.answers
            ),
            "adjudications": sorted(
                (a.question, a.reviewer, a.value, a.comment, str(marks(a.spans))) for a in record.adjudications
            ),
            "predictions": {
                order.index(key): sorted(
                    (
                        m.question,
                        m.answer,
                        str(rounded(m.distribution)),
                        None if m.confidence is None else round(m.confidence, 6),
                        str(marks(m.spans)),
                    )
                    for m in answers
                )
                for key, answers in record.predictions.items()
            },
            "model_skipped": {order.index(key): skipped for key, skipped in record.model_skipped.items()},
        }
    return out
