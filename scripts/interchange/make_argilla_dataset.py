"""Write tests/data/argilla/support_tickets: an Argilla 2.x dataset folder made by Argilla's own code.

Run with a Python that has argilla 2.x installed (not part of diffjev's install):

    python scripts/interchange/make_argilla_dataset.py tests/data/argilla/support_tickets

`Dataset.to_disk` writes three files: `.argilla/dataset.json` (the dataset model), `.argilla/settings.json`
(`Settings.to_json`) and `records.json` (`DatasetRecords.to_json`). Only the records need a server: to_disk
pages them from it through `DatasetRecords.__iter__`, then hands the list to `JsonIO.to_json`. Here the
records are built locally as `rg.Record` objects and given to that same `JsonIO.to_json`, and the dataset
model is dumped the way `_persist_dataset_model` dumps it (`DatasetModel.model_dump()`), so every byte comes
from Argilla's serialisers; nothing is written by hand. Afterwards the folder is read back with
`Settings.from_json` and `Record.from_dict`, the calls `Dataset.from_disk` makes, to show Argilla takes it.

Argilla's settings classes ask for a client when built; `OfflineArgilla` is its client with the connection
check left out, so the script needs no server.
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import argilla as rg
from argilla._models import DatasetModel
from argilla.records._io import JsonIO

# Two annotators, as Argilla names them in responses: by user id.
ANNA = uuid.UUID("5a6c2f6e-0000-4000-8000-00000000a001")
BORIS = uuid.UUID("5a6c2f6e-0000-4000-8000-00000000b002")
AGENT = "distilbert-support-v3"


class OfflineArgilla(rg.Argilla):
    """Argilla's client, which every settings class takes from `Argilla._get_default()`, minus the one
    request its constructor makes (a connection check). No request is ever sent: settings and records
    are only built and serialised here."""

    def _validate_connection(self) -> None:
        pass


def settings() -> rg.Settings:
    return rg.Settings(
        guidelines="Read the ticket and answer every question.",
        fields=[
            rg.TextField(name="text", title="Ticket"),
            rg.TextField(name="reply", title="Agent reply", required=False),
        ],
        questions=[
            rg.LabelQuestion(
                name="sentiment",
                title="What is the customer's mood?",
                labels=["positive", "neutral", "negative"],
            ),
            rg.MultiLabelQuestion(
                name="topics",
                title="Which topics does the ticket raise?",
                labels={"billing": "Billing", "shipping": "Shipping", "refund": "Refund"},
                required=False,
            ),
            rg.RatingQuestion(name="urgency", title="How urgent is it?", values=[1, 2, 3, 4, 5], required=False),
            rg.SpanQuestion(
                name="entities",
                field="text",
                labels={"PER": "Person", "ORG": "Organisation"},
                title="Mark people and organisations.",
                required=False,
            ),
        ],
        metadata=[
            rg.TermsMetadataProperty(name="channel", options=["email", "chat"]),
            rg.IntegerMetadataProperty(name="priority"),
        ],
    )


def span(text: str, word: str, label: str) -> dict:
    start = text.index(word)
    return {"start": start, "end": start + len(word), "label": label}


def records() -> list[rg.Record]:
    t1 = "Maria from Acme was charged twice and wants a refund."
    t2 = "Where is my parcel? DHL says it left Berlin a week ago."
    t3 = "Thanks, Tom fixed it quickly!"
    return [
        rg.Record(
            id="ticket-1",
            fields={"text": t1, "reply": "We are refunding the second charge."},
            metadata={"channel": "email", "priority": 2},
            suggestions=[
                rg.Suggestion("sentiment", "negative", score=0.82, agent=AGENT, type="model"),
                rg.Suggestion("topics", ["billing", "refund"], score=[0.91, 0.77], agent=AGENT, type="model"),
                rg.Suggestion("urgency", 4, score=0.6, agent=AGENT, type="model"),
                rg.Suggestion(
                    "entities",
                    [span(t1, "Maria", "PER"), span(t1, "Acme", "ORG")],
                    score=[0.95, 0.88],
                    agent=AGENT,
                    type="model",
                ),
            ],
            responses=[
                rg.Response("sentiment", "negative", user_id=ANNA, status="submitted"),
                rg.Response("topics", ["billing", "refund"], user_id=ANNA, status="submitted"),
                rg.Response("urgency", 4, user_id=ANNA, status="submitted"),
                rg.Response(
                    "entities", [span(t1, "Maria", "PER"), span(t1, "Acme", "ORG")], user_id=ANNA, status="submitted"
                ),
                rg.Response("sentiment", "neutral", user_id=BORIS, status="submitted"),
                rg.Response("urgency", 3, user_id=BORIS, status="submitted"),
            ],
        ),
        rg.Record(
            id="ticket-2",
            fields={"text": t2},
            metadata={"channel": "chat", "priority": 1},
            suggestions=[
                rg.Suggestion("sentiment", "negative", score=0.64, agent=AGENT, type="model"),
                rg.Suggestion("topics", ["shipping"], score=[0.97], agent=AGENT, type="model"),
                rg.Suggestion("entities", [span(t2, "DHL", "ORG")], score=[0.9], agent=AGENT, type="model"),
            ],
            responses=[
                rg.Response("sentiment", "negative", user_id=ANNA, status="submitted"),
                rg.Response("topics", ["shipping"], user_id=ANNA, status="submitted"),
                rg.Response("entities", [span(t2, "DHL", "ORG")], user_id=ANNA, status="submitted"),
                # Boris discarded the record: a response with no value.
                rg.Response("sentiment", None, user_id=BORIS, status="discarded"),
            ],
        ),
        rg.Record(
            id="ticket-3",
            fields={"text": t3},
            metadata={"channel": "chat"},
            suggestions=[rg.Suggestion("sentiment", "positive", score=0.97, agent=AGENT, type="model")],
        ),
    ]


def main(out: Path) -> None:
    if out.exists() and any(out.iterdir()):
        sys.exit(f"{out} is not empty; to_disk writes into an empty folder")
    rg.Argilla._set_default(OfflineArgilla(api_url="http://localhost:6900", api_key="offline"))
    (out / ".argilla").mkdir(parents=True, exist_ok=True)
    dataset_model = DatasetModel(name="support_tickets", status="ready", guidelines=settings().guidelines)
    with open(out / ".argilla" / "dataset.json", "w") as f:
        json.dump(dataset_model.model_dump(), f)
    settings().to_json(out / ".argilla" / "settings.json")
    JsonIO.to_json(records=records(), path=out / "records.json")

    # Read back as Dataset.from_disk does, then build each record's API model (what `records.log` sends).
    read = rg.Dataset(name="support_tickets", settings=rg.Settings.from_json(out / ".argilla" / "settings.json"))
    for data in json.loads((out / "records.json").read_text()):
        rg.Record.from_dict(data, dataset=read).api_model()
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/data/argilla/support_tickets"))
