"""Make tests/data/labelstudio/live/ (ls_export.json, ls_export_button.json, label_config.xml) with a
running Label Studio, so the fixture is Label Studio's own export and not a file written to fit
diffjev's reader.

It creates a project whose config holds a single <Choices>, a <Choices choice="multiple">, a <Rating>
and <Labels> over one <Text>, imports five tasks, has two people annotate them (one skips a task),
adds predictions from two model versions with their scores, and downloads the project's "JSON"
export through the REST API twice: ls_export.json from an export snapshot asked for full bodies
(predictions with their results, annotators with their email), and ls_export_button.json as the
Export button gives it (GET /api/projects/<id>/export), which lists predictions by id only and
annotators by user id. The config goes beside them as label_config.xml.

To run it again (about two minutes; nothing here is part of diffjev's install):

    python3.11 -m venv /tmp/venv-ls && /tmp/venv-ls/bin/pip install label-studio==1.23.2
    LABEL_STUDIO_USERNAME=alice@example.com LABEL_STUDIO_PASSWORD=alicepass123 \\
    LABEL_STUDIO_USER_TOKEN=alice0token0000000000000000000000000000 \\
      /tmp/venv-ls/bin/label-studio start --no-browser --port 8089 --data-dir /tmp/lsdata &
    /tmp/venv-ls/bin/python scripts/interchange/make_labelstudio_export_live.py \\
      --url http://localhost:8089 --out tests/data/labelstudio/live

Label Studio 1.23 turns legacy tokens off for a new organization, so the script first logs in with
the password (a browser session) and turns them on through /api/jwt/settings, the switch the
organization's settings page uses; from then on it uses the token through label_studio_sdk.
Timestamps and ids in the export are the server's; each run gives a new file with the same content.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import httpx
from label_studio_sdk import LabelStudio
from label_studio_sdk.types import SerializationOptionRequest, SerializationOptionsRequest

LABEL_CONFIG = """<View>
  <Text name="text" value="$text"/>
  <Choices name="sentiment" toName="text" choice="single" showInLine="true">
    <Choice value="positive"/>
    <Choice value="negative"/>
    <Choice value="neutral"/>
  </Choices>
  <Choices name="topics" toName="text" choice="multiple">
    <Choice value="billing"/>
    <Choice value="shipping"/>
    <Choice value="product"/>
  </Choices>
  <Rating name="urgency" toName="text" maxRating="5"/>
  <Labels name="ner" toName="text">
    <Label value="PER" hint="A person's name"/>
    <Label value="ORG"/>
    <Label value="LOC"/>
  </Labels>
</View>
"""

TASKS = [
    {"text": "Maria Lopez says the Acme invoice charged her twice.", "ticket": "T-101"},
    {"text": "My parcel from Berlin never arrived and Acme support is silent.", "ticket": "T-102"},
    {"text": "The blender works fine, thanks.", "ticket": "T-103"},
    {"text": "John Smith from Globex wants a refund for the broken lamp shipped to Paris.", "ticket": "T-104"},
    {"text": "Where is my order?", "ticket": "T-105"},
]


def choice(name: str, *values: str) -> dict:
    return {"from_name": name, "to_name": "text", "type": "choices", "value": {"choices": list(values)}}


def rating(stars: int) -> dict:
    return {"from_name": "urgency", "to_name": "text", "type": "rating", "value": {"rating": stars}}


def span(text: str, words: str, label: str, region: str) -> dict:
    start = text.index(words)
    value = {"start": start, "end": start + len(words), "text": words, "labels": [label]}
    return {"id": region, "from_name": "ner", "to_name": "text", "type": "labels", "value": value}


# Per task: (sentiment, topics, stars, [(words, label), ...]); None where the person skips the task.
ALICE = [
    ("negative", ["billing"], 4, [("Maria Lopez", "PER"), ("Acme", "ORG")]),
    ("negative", ["shipping"], 5, [("Berlin", "LOC"), ("Acme", "ORG")]),
    ("positive", ["product"], 1, []),
    ("negative", ["shipping", "product"], 3, [("John Smith", "PER"), ("Globex", "ORG"), ("Paris", "LOC")]),
    ("neutral", ["shipping"], 2, []),
]
BOB = [
    ("negative", ["billing", "product"], 3, [("Maria Lopez", "PER")]),
    ("negative", ["shipping"], 4, [("Berlin", "LOC"), ("Acme", "ORG")]),
    ("positive", [], 1, []),  # no topic chosen: the multi-label question left empty
    None,
    ("negative", ["shipping"], 3, []),
]


def answer_results(text: str, plan: tuple, who: str) -> list[dict]:
    sentiment, topics, stars, spans = plan
    out = [choice("sentiment", sentiment), rating(stars)]
    if topics:
        out.append(choice("topics", *topics))
    out += [span(text, words, label, f"{who}{n}") for n, (words, label) in enumerate(spans)]
    return out


def prediction(text: str, i: int, version: str) -> tuple[list[dict], float]:
    """A model's answers as an ML backend sends them: a score per region and one for the task."""
    sentiment = ["negative", "negative", "positive", "negative", "neutral"][i]
    stars = [4, 5, 1, 3, 2][i]
    topics = [["billing"], ["shipping"], ["product"], ["shipping"], ["shipping"]][i]
    score = round([0.91, 0.88, 0.97, 0.62, 0.55][i] - (0.1 if version == "baseline-v1" else 0.0), 3)
    results = [
        {**choice("sentiment", sentiment), "score": score},
        {**choice("topics", *topics), "score": round(score - 0.05, 3)},
        {**rating(stars), "score": round(score - 0.1, 3)},
    ]
    names = {0: [("Maria Lopez", "PER"), ("Acme", "ORG")], 1: [("Berlin", "LOC")], 3: [("John Smith", "PER")]}
    for n, (words, label) in enumerate(names.get(i, [])):
        results.append({**span(text, words, label, f"p{i}{n}{version[:1]}"), "score": round(score - 0.02, 3)})
    return results, score


def enable_legacy_tokens(url: str, email: str, password: str) -> None:
    with httpx.Client(base_url=url, follow_redirects=True) as web:
        web.get("/user/login/")
        form = {"email": email, "password": password, "csrfmiddlewaretoken": web.cookies["csrftoken"]}
        web.post("/user/login/", data=form, headers={"Referer": f"{url}/user/login/"}).raise_for_status()
        answer = web.post(
            "/api/jwt/settings",
            json={"api_tokens_enabled": True, "legacy_api_tokens_enabled": True},
            headers={"X-CSRFToken": web.cookies["csrftoken"], "Referer": url},
        )
        answer.raise_for_status()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://localhost:8089")
    parser.add_argument("--email", default="alice@example.com")
    parser.add_argument("--password", default="alicepass123")
    parser.add_argument("--token", default="alice0token0000000000000000000000000000")
    parser.add_argument("--out", type=Path, default=Path("tests/data/labelstudio/live"))
    args = parser.parse_args()

    enable_legacy_tokens(args.url, args.email, args.password)
    ls = LabelStudio(base_url=args.url, api_key=args.token)
    alice = ls.users.whoami()
    existing = {user.email: user for user in ls.users.list()}
    bob = existing.get("bob@example.com") or ls.users.create(
        email="bob@example.com", username="bob", first_name="Bob", last_name="Annotator"
    )

    project = ls.projects.create(title="Support tickets (diffjev fixture)", label_config=LABEL_CONFIG)
    ls.projects.import_tasks(id=project.id, request=TASKS)
    tasks = sorted(ls.tasks.list(project=project.id), key=lambda task: task.id)
    for i, task in enumerate(tasks):
        text = task.data["text"]
        alices = answer_results(text, ALICE[i], f"a{i}")
        ls.annotations.create(id=task.id, result=alices, completed_by=alice.id, lead_time=12.5 + i)
        if BOB[i] is None:
            ls.annotations.create(id=task.id, result=[], completed_by=bob.id, was_cancelled=True, lead_time=3.0)
        else:
            bobs = answer_results(text, BOB[i], f"b{i}")
            ls.annotations.create(id=task.id, result=bobs, completed_by=bob.id, lead_time=20.0 + i)
        for version in ("baseline-v1", "tuned-v2"):
            results, score = prediction(text, i, version)
            ls.predictions.create(task=task.id, result=results, score=score, model_version=version)

    # The Export button (GET /api/projects/<id>/export) lists predictions by id and annotators by user id;
    # an export snapshot asked for full bodies carries the predictions' results and each annotator's
    # email. Both are Label Studio's "JSON" export type; diffjev reads the second and names the first.
    quick = json.loads(b"".join(ls.projects.exports.download_sync(project.id, export_type="JSON")))
    full_bodies = SerializationOptionsRequest(
        predictions=SerializationOptionRequest(only_id=False),
        annotations_completed_by=SerializationOptionRequest(only_id=False),
    )
    snapshot = ls.projects.exports.create(project.id, title="diffjev fixture", serialization_options=full_bodies)
    for _ in range(60):
        if ls.projects.exports.get(project.id, snapshot.id).status == "completed":
            break
        time.sleep(1)
    full = json.loads(b"".join(ls.projects.exports.download(project.id, snapshot.id, export_type="JSON")))

    args.out.mkdir(parents=True, exist_ok=True)
    for name, tasks_json in (("ls_export.json", full), ("ls_export_button.json", quick)):
        (args.out / name).write_text(json.dumps(tasks_json, indent=2, ensure_ascii=False) + "\n")
    (args.out / "label_config.xml").write_text(ls.projects.get(project.id).label_config + "\n")
    print(f"{len(full)} tasks from project {project.id} -> {args.out}/ls_export.json, ls_export_button.json")


if __name__ == "__main__":
    main()
