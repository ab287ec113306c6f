"""Write tests/data/labelstudio/: a labeling config and a Label Studio JSON export of it, the regions made by
Label Studio's own SDK (label_studio_sdk.label_interface) and each annotation and prediction checked by its
validator, so the fixture is Label Studio's shape rather than diffjev's idea of it.

Run in an environment with label-studio-sdk (not part of diffjev's install):
    python scripts/interchange/make_labelstudio_export.py [OUT_DIR]
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

from label_studio_sdk.label_interface import LabelInterface

CONFIG = """<View>
  <Header value="Read the support ticket."/>
  <Text name="text" value="$text"/>
  <Header value="How does the customer feel?"/>
  <Choices name="sentiment" toName="text" choice="single" showInline="true">
    <Choice value="positive"/>
    <Choice value="negative"/>
    <Choice value="neutral" hint="Neither pleased nor upset"/>
  </Choices>
  <Header value="Which topics does the ticket raise?"/>
  <Choices name="topics" toName="text" choice="multiple">
    <Choice value="billing"/>
    <Choice value="shipping"/>
    <Choice value="account"/>
  </Choices>
  <Rating name="urgency" toName="text" maxRating="4" hint="How urgent is the ticket?"/>
  <Labels name="ner" toName="text">
    <Label value="PER" background="red"/>
    <Label value="ORG" background="blue" hint="Companies and brands"/>
  </Labels>
  <Taxonomy name="team" toName="text" maxUsages="1">
    <Choice value="Sales"/>
    <Choice value="Support"/>
  </Taxonomy>
</View>
"""

TEXTS = [
    "Alice from Acme was charged twice for the same order.",
    "My parcel never arrived and Bob at FastShip will not answer.",
    "Thanks, the new plan works fine.",
]
USERS = {1: "alice@example.com", 2: "bob@example.com"}
REGION_IDS = itertools.count(1)
STAMP = "2024-05-02T10:00:00.000000Z"


def span(text: str, words: str) -> dict:
    start = text.index(words)
    return {"start": start, "end": start + len(words), "text": words}


def regions(li: LabelInterface, text: str, picks: dict) -> list[dict]:
    """Result regions made by the SDK's controls, as Label Studio stores them."""
    out = []
    for name, value in picks.items():
        control = li.get_control(name)
        if name == "ner":
            for label, words in value:
                where = span(text, words)
                region = control.label(label, start=where["start"], end=where["end"])
                body = region._dict()
                body["value"]["text"] = where["text"]
                out.append(body)
        elif name == "urgency":
            out.append(control.label(rating=value)._dict())
        elif name == "team":
            out.append(control.label(taxonomy=[[value]])._dict())
        else:
            out.append(control.label(value)._dict())
    for body in out:
        body["id"] = f"{body['from_name']}-{next(REGION_IDS)}"  # the SDK draws uuids; fixed ids keep the file stable
        body.setdefault("origin", "manual")
    return out


def annotation(li, task_id, n, text, who, picks, cancelled=False, lead_time=12.5):
    result = [] if cancelled else regions(li, text, picks)
    body = {
        "id": n,
        "completed_by": who,
        "result": result,
        "was_cancelled": cancelled,
        "ground_truth": False,
        "created_at": STAMP,
        "updated_at": STAMP,
        "draft_created_at": None,
        "lead_time": lead_time,
        "prediction": {},
        "result_count": len(result),
        "unique_id": f"00000000-0000-0000-0000-{n:012d}",
        "import_id": None,
        "last_action": None,
        "bulk_created": False,
        "task": task_id,
        "project": 7,
        "updated_by": who if isinstance(who, int) else who["id"],
        "parent_prediction": None,
        "parent_annotation": None,
        "last_created_by": None,
    }
    assert li.validate_annotation(body), body
    return body


def prediction(li, task_id, n, text, version, score, picks, scores=None):
    result = regions(li, text, picks)
    for body in result:
        body["origin"] = "prediction"
        if scores and body["from_name"] in scores:
            body["score"] = scores[body["from_name"]]
    body = {
        "id": n,
        "result": result,
        "model_version": version,
        "created_ago": "0\xa0minutes",
        "score": score,
        "cluster": None,
        "neighbors": None,
        "mislabeling": 0.0,
        "created_at": STAMP,
        "updated_at": STAMP,
        "model": None,
        "model_run": None,
        "task": task_id,
        "project": 7,
    }
    assert li.validate_prediction(body), li.validate_prediction(body, return_errors=True)
    return body


def task(task_id, text, annotations, predictions):
    return {
        "id": task_id,
        "annotations": annotations,
        "file_upload": "tickets.json",
        "drafts": [],
        "predictions": predictions,
        "data": {"text": text, "channel": "email"},
        "meta": {},
        "created_at": STAMP,
        "updated_at": STAMP,
        "inner_id": task_id,
        "total_annotations": len(annotations),
        "cancelled_annotations": sum(a["was_cancelled"] for a in annotations),
        "total_predictions": len(predictions),
        "comment_count": 0,
        "unresolved_comment_count": 0,
        "last_comment_updated_at": None,
        "project": 7,
        "updated_by": None,
        "comment_authors": [],
    }


def main(out: Path) -> None:
    li = LabelInterface(CONFIG)
    li.validate()
    alice = {"id": 1, "email": USERS[1], "first_name": "Alice", "last_name": ""}
    t0, t1, t2 = TEXTS
    tasks = [
        task(
            101,
            t0,
            [
                annotation(
                    li,
                    101,
                    1,
                    t0,
                    alice,
                    {
                        "sentiment": ["negative"],
                        "topics": ["billing"],
                        "urgency": 3,
                        "ner": [("PER", "Alice"), ("ORG", "Acme")],
                        "team": "Sales",
                    },
                ),
                annotation(
                    li,
                    101,
                    2,
                    t0,
                    2,
                    {
                        "sentiment": ["negative"],
                        "topics": ["billing", "account"],
                        "urgency": 4,
                        "ner": [("PER", "Alice")],
                    },
                    lead_time=30.0,
                ),
            ],
            [
                prediction(
                    li,
                    101,
                    1,
                    t0,
                    "gemma-v1",
                    0.8,
                    {"sentiment": ["negative"], "topics": ["billing"], "ner": [("ORG", "Acme")]},
                    scores={"sentiment": 0.9},
                )
            ],
        ),
        task(
            102,
            t1,
            [
                annotation(
                    li,
                    102,
                    3,
                    t1,
                    2,
                    {
                        "sentiment": ["negative"],
                        "topics": ["shipping"],
                        "urgency": 4,
                        "ner": [("PER", "Bob"), ("ORG", "FastShip")],
                        "team": "Support",
                    },
                )
            ],
            [
                prediction(li, 102, 2, t1, "gemma-v1", 0.7, {"sentiment": ["negative"], "topics": ["shipping"]}),
                prediction(li, 102, 3, t1, "gemma-v2", 0.95, {"sentiment": ["negative"], "urgency": 4}),
            ],
        ),
        task(103, t2, [annotation(li, 103, 4, t2, alice, {}, cancelled=True, lead_time=2.0)], []),
    ]
    out.mkdir(parents=True, exist_ok=True)
    (out / "label_config.xml").write_text(CONFIG, encoding="utf-8")
    (out / "export.json").write_text(json.dumps(tasks, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2] / "tests/data/labelstudio")
