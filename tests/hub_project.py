"""A project with everything a Hub export carries: a staged question, a choice, a span question, two
annotators who disagree, a reviewer's adjudication, a skipped item, a question not asked, and a pre-label
run of the tiny DiffusionGemma over every item. Shared by the dataset card and re-import tests."""

from __future__ import annotations

import pandas as pd

from diffjev import Schema
from diffjev.services import adjudication, annotation
from diffjev.services.importing import import_items
from diffjev.services.prelabel import prelabel
from diffjev.services.review import shown_item
from storage import repo
from storage.db import Database

SCHEMA = {
    "questions": [
        {"id": "urgent", "type": "yes_no", "instructions": "Does the customer need a reply within the hour?"},
        {"id": "outage", "type": "yes_no", "instructions": "Is it an outage?", "ask_if": {"urgent": "yes"}},
        {"id": "calm", "type": "yes_no", "instructions": "Is the customer calm?", "ask_if": {"urgent": "no"}},
        {"id": "team", "type": "choice", "instructions": "Which team | desk?", "options": ["billing", "technical"]},
        {"id": "product", "type": "span", "instructions": "Which words name the product?"},
    ],
    "instructions": "Support tickets.",
    "samples": 1,
}
TEXTS = [
    "Order 🙂: the Acme Phone X will not start and the site is down.",
    "Please refund the Acme Kettle, it was charged twice.",
    "Line one\r\nThe Cafe\u0301 Deluxe kettle leaks.",
]
PRODUCT = (TEXTS[0].index("Acme Phone X"), TEXTS[0].index("Acme Phone X") + len("Acme Phone X"))


def card(db: Database, external_id: str, annotator: str) -> annotation.ItemCard:
    project_id, schema, rows, _ = annotation.project_schema(db, "p")
    with db.read() as session:
        item_id = shown_item(session, project_id, external_id)
    return annotation.load_item_card(db, project_id, item_id, schema, rows, None, annotator)


def hub_project(path, engine) -> Database:
    db = Database(path)
    with db.session() as session:
        repo.create_project(session, "p", Schema.from_dict(SCHEMA), "owner")
    import_items(db, "p", pd.DataFrame({"id": ["t0", "t1", "t2"], "text": TEXTS}), id_field="id")
    prelabel(db, "p", engine)
    product = f"{PRODUCT[0]}-{PRODUCT[1]}"
    # ann: not urgent (so outage is not asked of her), billing, the product's span
    annotation.accept_item(
        db, card(db, "t0", "ann"), "ann", {"urgent": "no", "calm": "yes", "team": "billing", "product": product}, 4
    )
    # bob: urgent, an outage, technical, no product named
    annotation.accept_item(
        db, card(db, "t0", "bob"), "bob", {"urgent": "yes", "outage": "yes", "team": "technical", "product": "none"}, 8
    )
    adjudication.adjudicate(db, "p", "t0", "team", "technical", "carol", "the site is down")
    annotation.accept_item(
        db, card(db, "t1", "ann"), "ann", {"urgent": "no", "calm": "no", "team": "billing", "product": "none"}, 2
    )
    annotation.accept_item(
        db, card(db, "t1", "bob"), "bob", {"urgent": "no", "calm": "no", "team": "billing", "product": "none"}, 3
    )
    annotation.skip_item(db, card(db, "t2", "ann"), "ann", 1.5)
    return db
