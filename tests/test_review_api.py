"""The Review tab through its Gradio endpoints on a real studio: changing an answer by the id the card
shows, the auto-accept recommendation and its interval, the plots' counts and colours, and the sentences
shown in place of empty tables. Schema errors as the Project tab shows them."""

import html

import httpx
import pandas as pd
import pytest
from gradio_client import Client
from sqlalchemy import select

from diffjev import Schema
from diffjev.services.importing import import_items
from storage import repo
from storage.db import Database
from storage.models import Item, ItemRead, Response, Suggestion
from studio_fixtures import serve_studio, studio_db

TEAM = {
    "questions": [
        {"id": "team", "type": "choice", "instructions": "Team?", "options": ["billing", "technical", "account"]}
    ],
    "samples": 1,
}


def graded(path, reads: list[tuple[float, bool]], name="p") -> tuple[Database, int]:
    """A project whose one run read each item with the given top confidence, right or wrong against the
    human answer 'billing' every item has (items k0, k1, ...)."""
    db = Database(path)
    with db.session() as session:
        project_id = repo.create_project(session, name, Schema.from_dict(TEAM), "owner").id
    texts = pd.DataFrame({"id": [f"k{k}" for k in range(len(reads))], "text": [f"text {k}" for k in range(len(reads))]})
    import_items(db, name, texts, id_field="id")
    with db.session() as session:
        version = repo.latest_version(session, project_id)
        row = repo.version_schema(version)[1]["team"]
        run = repo.create_run(session, project_id, version, "diffusion", "m", None, {}, "owner").id
        items = session.scalars(select(Item.id).where(Item.project_id == project_id).order_by(Item.id)).all()
        for item, (top, right) in zip(items, reads):
            dist = {"billing": top, "technical": 1 - top, "account": 0.0}
            if not right:
                dist = {"billing": 1 - top, "technical": top, "account": 0.0}
            session.add(
                Suggestion(
                    run_id=run,
                    item_id=item,
                    question_id=row,
                    answer=max(dist, key=dist.get),
                    distribution=dist,
                    confidence=top,
                    full_vocab_confidence=top,
                    entropy=0.5,
                    margin=0.1,
                    label_mass=1.0,
                    stderr=None,
                    agreement=None,
                    draws=1,
                    value=None,
                    latency_ms=1.0,
                )
            )
            session.add(ItemRead(run_id=run, item_id=item, status="ok"))  # a suggestion is stored with its read
            session.add(
                Response(
                    item_id=item,
                    question_id=row,
                    annotator="ann",
                    value="billing",
                    source="manual",
                    suggestion_shown=True,
                    status="submitted",
                    revision=1,
                )
            )
    return db, run


TWO_LUCKY = [(0.95, True)] * 2 + [(0.6, k % 2 == 0) for k in range(38)]  # 2 sure items, then a coin toss


def plot_rows(plot: dict) -> pd.DataFrame:
    """A native plot's value as the page receives it."""
    value = plot.get("value", plot) if isinstance(plot, dict) else plot
    return pd.DataFrame(value["data"], columns=value["columns"])


def test_two_lucky_items_make_no_recommendation_and_the_note_says_how_many_more(tmp_path, dgemma_engine):
    db, run = graded(tmp_path / "lucky.db", TWO_LUCKY)
    server, _ = serve_studio(db, dgemma_engine, name="p")
    with server:
        _, _, bins, curve, note = Client(server.url, verbose=False).predict("team", run, 0.95, api_name="/calibrate")
    assert "would take" not in note, note  # before: "≥ 0.950 would take 5% ... at 100.0% accuracy"
    assert "No threshold is sure to reach 95% yet" in note and "**2**" in note, note
    assert "34.2%–100.0%" in note and "**71 more**" in note, note  # Wilson 2/2; 73 items at 100% meet 95%
    points = plot_rows(curve)
    top = points[points.threshold == 0.95].set_index("measure")
    assert top.loc["accuracy", "value"] == pytest.approx(1.0) and set(top["items accepted"]) == {2}
    assert top.loc["accuracy, 95% lower bound", "value"] == pytest.approx(0.342, abs=1e-3)
    assert set(points[points.threshold == 0.6]["items accepted"]) == {40}
    assert plot_rows(bins)["items"].sum() == 40  # the count behind every reliability bin


def test_a_threshold_is_recommended_where_the_interval_lower_bound_meets_the_target(tmp_path, dgemma_engine):
    reads = [(0.97, True)] * 200 + [(0.6, k % 2 == 0) for k in range(40)]
    db, run = graded(tmp_path / "sure.db", reads)
    server, _ = serve_studio(db, dgemma_engine, name="p")
    with server:
        client = Client(server.url, verbose=False)
        note = client.predict("team", run, 0.95, api_name="/calibrate")[-1]
        assert "≥ **0.970**" in note and "(200)" in note and "98.1%–100.0%" in note, note
        never = client.predict("team", run, 1.0, api_name="/calibrate")[-1]
    assert "No number of answers can show 100% accuracy" in never, never


def test_both_plots_give_a_series_one_colour_and_the_diagram_a_reading_guide(tmp_path, dgemma_engine):
    db, _ = graded(tmp_path / "colours.db", TWO_LUCKY)
    server, _ = serve_studio(db, dgemma_engine, name="p")
    with server:
        config = httpx.get(f"{server.url}/config", timeout=30).json()
    props = {c["props"].get("elem_id"): c["props"] for c in config["components"] if c.get("props")}
    diagram, counts, curve = props["reliability"], props["reliability-counts"], props["auto-accept"]
    assert diagram["color_map"]["accuracy"] == curve["color_map"]["accuracy"]
    for plot in (diagram, counts, curve):  # no two series share a colour
        assert len(set(plot["color_map"].values())) == len(plot["color_map"])
    assert "below the grey diagonal" in props["reliability-guide"]["value"]


def test_change_an_answer_takes_the_id_the_card_shows(tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "ids.db", ["The site is down", "Refund please"], dgemma_engine)
    import_items(db, "tickets", pd.DataFrame({"text": ["An item without an id of its own"]}))
    with db.read() as session:
        bare = session.scalar(select(Item.id).where(Item.external_id.is_(None)))
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        client = Client(server.url, verbose=False)
        said = client.predict("t1", "team", "billing", api_name="/review_change")
        assert said == "Item t1, team: changed to billing.", said
        missing = client.predict("t99", "team", "billing", api_name="/review_change")
        assert missing == "⚠️ no item t99 in this project", missing
        assert client.predict(str(bare), "team", "account", api_name="/review_change").startswith(f"Item {bare},")
        for number in ("1", "\u0661"):  # t1's number (or an Arabic-Indic 1): t1's card shows "t1", not a number
            said = client.predict(number, "team", "technical", api_name="/review_change")
            assert said == f"⚠️ no item {number} in this project", said
    with db.read() as session:
        stored = session.execute(
            select(Item.external_id, Response.value).join(Item, Item.id == Response.item_id).order_by(Item.id)
        ).all()
    assert [tuple(r) for r in stored] == [("t1", "billing"), (None, "account")]


def test_empty_review_tables_say_why_and_what_to_do(tmp_path, dgemma_engine):
    db = studio_db(tmp_path / "empty.db", ["The site is down", "Refund please"])  # no run, no answer
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        client = Client(server.url, verbose=False)
        _, disagree, disagree_why, unsure, unsure_why = client.predict(api_name="/review")
        _, _, agreement_why = client.predict(api_name="/agreement")
        _, _, comparison_why = client.predict(api_name="/compare_runs")
    assert "No item has a human answer yet" in disagree_why and "Annotate tab" in disagree_why
    assert "No item has a human answer yet" in unsure_why
    assert "No item has answers from two annotators yet" in agreement_why
    assert "No run yet: start one on the Pre-label tab" in comparison_why


def test_an_answered_project_without_disagreements_says_so(tmp_path, dgemma_engine):
    db, run = graded(tmp_path / "agree.db", [(0.9, True)] * 3)
    server, _ = serve_studio(db, dgemma_engine, name="p")
    with server:
        outputs = Client(server.url, verbose=False).predict(api_name="/review")
    assert f"agree on every answered item the model read (each item's latest read; latest run {run})" in outputs[2]
    assert "No suggestion was accepted while the model's confidence was below 0.6" in outputs[4], outputs


@pytest.mark.parametrize(
    "question, field, hint",
    [
        ({"id": "q", "type": "choice", "instructions": "?"}, "options", 'list the options, e.g. ["billing"'),
        ({"id": "q", "type": "score", "instructions": "?"}, "levels", 'list the levels, e.g. ["calm"'),
        ({"id": "q", "type": "rating", "instructions": "?"}, "type", "noul is the Jev API's name for yes_no"),
    ],
)
def test_the_project_tab_names_the_field_the_user_wrote(tmp_path, dgemma_engine, question, field, hint):
    import json

    db = studio_db(tmp_path / "schema.db", ["The site is down"])
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        error, _ = Client(server.url, verbose=False).predict(
            json.dumps({"questions": [question]}), "", api_name="/preview_schema"
        )
    error = html.unescape(error)  # Markdown text from anyone is written as character references
    assert f"field '{field}'" in error and hint in error, error


def test_review_compares_each_items_latest_read_while_a_newer_run_reads_or_a_picked_run(tmp_path):
    """A newer run that has read one item so far does not hide the older run's suggestions from Review
    (before, the review tables took the newest run with reads only, and lost every other item)."""
    from diffjev.services import review

    db, old = graded(tmp_path / "two.db", [(0.9, False)] * 3)  # the old run says technical; humans billing
    with db.session() as session:
        project = repo.get_project(session, "p")
        version = repo.latest_version(session, project.id)
        row = repo.version_schema(version)[1]["team"]
        new = repo.create_run(session, project.id, version, "diffusion", "m", None, {}, "owner").id
        first = session.scalars(select(Item.id).where(Item.project_id == project.id).order_by(Item.id)).first()
        older = session.scalar(select(Suggestion).where(Suggestion.run_id == old, Suggestion.item_id == first))
        older.is_current = False  # the newer run's read of the first item takes over, as store_reads does
        dist = {"billing": 0.8, "technical": 0.1, "account": 0.1}
        session.add(
            Suggestion(
                run_id=new, item_id=first, question_id=row, answer="billing", distribution=dist, confidence=0.8,
                full_vocab_confidence=0.8, entropy=0.5, margin=0.7, label_mass=1.0, stderr=None, agreement=None,
                draws=1, value=None, latency_ms=1.0, is_current=True,
            )
        )  # fmt: skip
        session.add(ItemRead(run_id=new, item_id=first, status="ok"))
    assert len(review.disagreements(db, "p")) == 2  # the two items only the old run has read
    assert len(review.disagreements(db, "p", run=old)) == 3
    assert review.disagreements(db, "p", run=new) == []
    said = review.why_empty(db, "p", run=new)["disagreements"]
    assert said.startswith(f"The model (run {new}) and the humans agree on every answered item that run read"), said
    with pytest.raises(repo.NotFound):
        review.disagreements(db, "p", run=new + 10)


def test_calibrate_without_a_question_answers_with_a_note(tmp_path, dgemma_engine):
    db, run = graded(tmp_path / "no-question.db", TWO_LUCKY)
    server, _ = serve_studio(db, dgemma_engine, name="p")
    with server:
        note = Client(server.url, verbose=False).predict("", run, 0.95, api_name="/calibrate")[-1]
    assert "Choose a question" in note


def test_review_judges_the_model_by_the_adjudicated_answer_as_calibrate_does(tmp_path):
    """An adjudicated answer is the item's truth, once an item: Review said the model agreed with the humans
    on an item a reviewer settled against it, while Calibrate counted the model wrong; then it counted a
    settled item once per annotator, and credited the settled answer to each of them."""
    from diffjev.services import review

    db, _ = graded(tmp_path / "settled.db", [(0.5, True)] * 3)  # the model and "ann" say billing, unsure
    with db.session() as session:
        project = repo.get_project(session, "p")
        row = repo.version_schema(repo.latest_version(session, project.id))[1]["team"]
        first = session.scalars(select(Item.id).where(Item.project_id == project.id).order_by(Item.id)).first()
        anns = session.scalar(select(Response).where(Response.item_id == first, Response.annotator == "ann"))
        anns.source = "accepted"  # "ann" took the suggestion
        bob = Response(item_id=first, question_id=row, annotator="bob", value="technical", source="manual")
        session.add(bob)
        bob.suggestion_shown, bob.status, bob.revision = False, "submitted", 1
        session.flush()
        repo.adjudicate(session, first, row, "account", "lead", "the ticket is about a login")
    (report,) = review.question_report(db, "p")
    assert report["answered"] == 4 and report["model accuracy"] == round(2 / 3, 3)  # k0 once, by "account"
    (disagreement,) = review.disagreements(db, "p")
    assert (disagreement["item"], disagreement["model"], disagreement["human"]) == ("k0", "billing", "account")
    assert (disagreement["annotator"], disagreement["source"]) == ("lead", "adjudicated")
    # what "ann" accepted while the model was unsure stays what "ann" did, settled since or not
    accepted = [r for r in review.low_confidence_accepts(db, "p") if r["item"] == "k0"]
    assert [(r["human"], r["annotator"], r["source"]) for r in accepted] == [("billing", "ann", "accepted")]
