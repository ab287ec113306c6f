"""A new team's first hour, in a real browser (Debian chromium through Playwright) on a fresh SQLite file:
the demo project the studio makes on a first start, being read in the background; then a project of the
team's own: its schema saved in the Project tab, a CSV with a bad row imported, pre-labeled, annotated by
keyboard (accept, pick, skip, undo, the Skipped queue), reviewed and exported. Each step checks what the
page says; the end checks the files downloaded and what the database holds."""

import csv
import json
import re
import subprocess
import sys
import threading

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from sqlalchemy import select

from diffjev.demo import demo_tickets
from diffjev.engines.base import Engine
from diffjev.services.prelabel import prelabel
from storage import repo
from storage.db import Database
from storage.models import Project, Question, Response
from diffjev.ui.studio import DEMO_PROJECT, ensure_project
from studio_fixtures import choose, one_question_at_a_time, serve_studio

WAIT_MS = 30_000
OWN = "helpdesk"
TEAMS = ["billing", "technical", "account"]
# What `diffjev init` starts from: one question, nothing hidden.
DRAFT_SCHEMA = {
    "instructions": "Helpdesk tickets.",
    "questions": [{"id": "team", "type": "choice", "instructions": "Which team?", "options": TEAMS}],
    "samples": 1,
}
# What the Project tab saves over it: a second question, descriptions, and the gold column hidden.
OWN_SCHEMA = {
    "instructions": "Helpdesk tickets.",
    "questions": [
        {
            "id": "team",
            "type": "choice",
            "instructions": "Which team should answer?",
            "options": [
                {"name": "billing"},
                {"name": "technical", "description": "bugs, outages"},
                {"name": "account"},
            ],
        },
        {"id": "urgent", "type": "yes_no", "instructions": "Does it need a reply today?"},
    ],
    "samples": 1,
    "hidden_fields": ["expected_team"],
}
# Line 3 holds Latin-1 bytes: not UTF-8.
OWN_CSV = (
    b"id,subject,body,plan,expected_team\n"
    b"k1,Outage,The whole site is down since noon,pro,technical\n"
    b"k2,Caf\xe9,Latin-1 bytes on this line,free,billing\n"
    b"k3,Invoice,I was charged twice this month,team,billing\n"
    b"k4,Seats,Please add two seats for new colleagues,free,account\n"
    b"k5,Login,The reset link expired before I used it,pro,account\n"
)
BODIES = {
    "k1": "The whole site is down since noon",
    "k3": "I was charged twice this month",
    "k4": "Please add two seats for new colleagues",
    "k5": "The reset link expired before I used it",
}
GOLD = {"k1": "technical", "k3": "billing", "k4": "account", "k5": "account"}


def shows(page, selector: str, text: str, timeout: int = WAIT_MS) -> str:
    """Wait until the element's text holds `text`; its whole text."""
    try:
        page.wait_for_function(
            f"(document.querySelector({json.dumps(selector)})?.innerText || '').includes({json.dumps(text)})",
            timeout=timeout,
        )
    except PlaywrightTimeout:
        pytest.fail(f"{selector} never showed {text!r}; it shows {page.inner_text(selector)!r}")
    return page.inner_text(selector)


def until(page, condition: str, what: str) -> None:
    """Wait for a condition on the page; a failure names what never came."""
    try:
        page.wait_for_function(condition, timeout=WAIT_MS)
    except PlaywrightTimeout:
        pytest.fail(f"the page never showed {what}")


def shown_id(page) -> str:
    return page.inner_text("#item .dj-id").removeprefix("item ")


def press(page, key: str, until: str | None = None) -> str:
    """Press a key on the page, and wait until the card is another item (or item `until`); its id."""
    before = page.inner_text("#item .dj-id")
    page.keyboard.press(key)
    if until is None:
        page.wait_for_function(f"document.querySelector('#item .dj-id')?.innerText !== {json.dumps(before)}")
    else:
        page.wait_for_function(f"document.querySelector('#item .dj-id')?.innerText === 'item {until}'")
    return shown_id(page)


def start(page, question: str, queue: str) -> None:
    """As a keyboard user starts: Enter on the focused Start button (it said "Press Start first")."""
    one_question_at_a_time(page)
    choose(page, "#annotate-question", question)
    choose(page, "#annotate-queue", queue)
    before = page.inner_text("#annotate-progress")
    page.locator("#annotate-start").focus()
    page.keyboard.press("Enter")
    page.wait_for_function(f"document.querySelector('#annotate-progress').innerText !== {json.dumps(before)}")
    assert "Press Start" not in page.inner_text("#annotate-progress")


def focus_page(page) -> None:
    """Keys go to the page, not to the Start button (where Enter would press Start again)."""
    page.locator("body").click(position={"x": 5, "y": 5})


def model_answer(page) -> str:
    return page.inner_text("#suggestion-info").split("Model: ")[1].split(",")[0].strip()


def table_or_sentence(page, table: str, why: str) -> None:
    """A review table shows rows, or a sentence saying why it is empty; never placeholder headers."""
    page.wait_for_function(
        f"document.querySelector('{table} tbody td') !== null && document.querySelector('{table}').checkVisibility()"
        f" || (document.querySelector('{why}')?.innerText || '').trim().length > 20",
        timeout=WAIT_MS,
    )
    if page.locator(table).is_visible():
        headers = [h.strip() for h in page.locator(f"{table} thead th").all_inner_texts()]
        assert headers[:3] != ["1", "2", "3"], headers
        assert page.inner_text(why).strip() == ""
    else:
        assert len(page.inner_text(why).strip()) > 20


def download(page, fmt: str) -> str:
    """Export the answered items as `fmt` and download the file; its text. On a freshly loaded page, so the
    note and the button are this export's, not an earlier one's."""
    page.reload()
    page.get_by_role("tab", name="Export").click()
    choose(page, "#export-format", fmt)
    page.locator("#export-go").click()
    shows(page, "#export-note", "Exported 4 items.")
    with page.expect_download() as done:
        page.locator("#export-download").click()
    assert done.value.suggested_filename.endswith(f".{fmt}"), done.value.suggested_filename
    return open(done.value.path(), encoding="utf-8").read()


class Gated(Engine):
    """The tiny engine behind gates: it reads nothing until `first` opens, then `ahead` items, then the
    rest once `rest` opens, unless the run was cancelled by then. The page is checked at each stage."""

    def __init__(self, inner: Engine, ahead: int, cancel: threading.Event):
        self.inner, self.ahead, self.cancel = inner, ahead, cancel
        self.first, self.rest = threading.Event(), threading.Event()
        self.name, self.model_name = inner.name, inner.model_name

    def check_schema(self, schema):
        self.inner.check_schema(schema)

    def decide_many(self, schema, states, seed=42):
        for i, state in enumerate(states):
            (self.first if i < self.ahead else self.rest).wait(60)
            if self.cancel.is_set():
                return
            yield from self.inner.decide_many(schema, [state], seed)


def assert_no_gold(page) -> None:
    """The demo's card shows the ticket, never its gold team (a hidden field)."""
    card = page.inner_text("#item")
    gold = {t["id"]: t["expected_team"] for t in demo_tickets()}[shown_id(page)]
    assert "expected_team" not in card and gold not in card, card


def walk_the_demo(browser, db: Database, engine: Engine) -> None:
    """The demo as a first start makes it (`ensure_project`, then its pre-label run in the background, as
    `diffjev.ui.studio.main` starts it): the queue serves items before the first read, the run's progress
    shows, a queue emptied while the run reads says so, and the cards never show the gold team. The run is
    cancelled after a few reads, to keep the walk short; the suggestions read stay."""
    name, created = ensure_project(db)
    assert (name, created) == (DEMO_PROJECT, True)
    cancel = threading.Event()
    gated = Gated(engine, 3, cancel)
    background = threading.Thread(target=prelabel, args=(db, name, gated), kwargs={"cancel": cancel}, daemon=True)
    server, _ = serve_studio(db, engine, name=name)
    with server:
        background.start()
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        shows(page, "#annotate-prelabel", "Pre-labeling (run 1): 0/60 read")
        # Nothing read yet: the queue serves items in order, saying there is no suggestion yet.
        one_question_at_a_time(page)
        page.locator("#annotate-start").click()  # the first question, least confidence first
        shows(page, "#suggestion-info", "No suggestion for this item.")
        assert_no_gold(page)
        gated.first.set()
        page.wait_for_function(
            "/Pre-labeling \\(run 1\\): 3\\/60 read/.test(document.querySelector('#annotate-prelabel').innerText)",
            timeout=WAIT_MS,
        )
        line = page.inner_text("#annotate-prelabel")
        assert "items/s" in line and "ETA" in line, line
        one_question_at_a_time(page)
        page.locator("#annotate-start").click()  # the three items read are in the queue at once
        shows(page, "#suggestion-info", "Model:")
        assert_no_gold(page)
        # Skipping the three leaves the queue empty while the run reads: the page says why.
        focus_page(page)
        skipped = [shown_id(page), press(page, "s")]
        skipped.append(press(page, "s"))
        assert len(set(skipped)) == 3, skipped
        page.keyboard.press("s")
        said = shows(page, "#annotate-progress", "Nothing left in this queue.")
        assert "Pre-labels are still being read: 3 of 60 items done" in said, said
        cancel.set()  # honoured while the engine still holds its reads
        background.join(WAIT_MS / 1000)
        assert not background.is_alive()
        gated.rest.set()  # the engine's thread ends without reading more
        page.get_by_role("tab", name="Pre-label").click()
        shows(page, "#prelabel-runs", "cancelled")
        page.close()


def create_own_project(db_path, tmp_path) -> None:
    """`diffjev init`, as the README says a project of one's own is made; the studio opens it by name."""
    draft = tmp_path / "schema.json"
    draft.write_text(json.dumps(DRAFT_SCHEMA))
    made = subprocess.run(
        [sys.executable, "-m", "diffjev.cli", "init", "--db", str(db_path), "--project", OWN]
        + ["--schema", str(draft), "--text-field", "body"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    assert f"created project '{OWN}'" in made.stdout


def save_schema(page) -> None:
    page.get_by_role("tab", name="Project").click()
    shows(page, "#schema-json", "Which team?")
    page.locator("#schema-json .cm-content").click()
    page.keyboard.press("Control+A")
    page.keyboard.insert_text(json.dumps(OWN_SCHEMA, indent=1))
    shows(page, "#canvas-preview", "urgent @")
    page.locator("#schema-save").click()
    shows(page, "#schema-error", "Saved as schema version 2")
    page.reload()


def import_with_a_bad_row(page, csv_path) -> None:
    page.get_by_role("tab", name="Import").click()
    page.locator("#import-file input[type=file]").set_input_files(str(csv_path))
    page.locator("#import-preview").click()
    shows(page, "#import-table", BODIES["k5"])
    shows(page, "#import-preview-note", "line 3: bytes that are not UTF-8")
    assert "Latin-1" not in page.inner_text("#import-table")  # the good rows only
    # The project's text field and the id column are picked; neither is offered as context.
    assert page.locator("#import-text input").input_value() == "body"
    assert page.locator("#import-id input").input_value() == "id"
    offered = [label.strip() for label in page.locator("#import-context label").all_inner_texts()]
    assert offered == ["subject", "plan", "expected_team"], offered
    assert not page.locator("#import-confirm").is_visible()
    page.locator("#import-go").click()
    report = shows(page, "#import-report", "Imported 4")
    assert "line 3: bytes that are not UTF-8" in report, report


def prelabel_own(page) -> None:
    page.get_by_role("tab", name="Pre-label").click()
    page.locator("#prelabel-start").click()
    report = shows(page, "#prelabel-report", "completed", timeout=60_000)
    assert "Run 2 completed: 4 items read, 0 failed" in report, report
    runs = shows(page, "#prelabel-runs", "completed")
    assert re.search(r"\b2\s+transformers\b.*\bcompleted\s+4\s+0\b", runs, re.S), runs


def annotate_by_keyboard(page, db: Database) -> dict[str, str]:
    """Accept, pick, skip and undo on `team`; then the Skipped queue. The answers given, by item."""
    page.get_by_role("tab", name="Annotate").click()
    start(page, "team", "Unlabeled, in order")
    shows(page, "#question-text", "Which team should answer?")
    assert "technical — bugs, outages" in page.inner_text("#answer-options")
    card = page.inner_text("#item")
    assert shown_id(page) == "k1" and BODIES["k1"] in card and "Outage" in card and "pro" in card
    assert "expected_team" not in card and GOLD["k1"] not in card, card  # the gold column stays hidden
    assert card.count(BODIES["k1"]) == 1, card  # the text once, not again as a context field
    focus_page(page)
    # A first try, undone: accept, pick, skip, then undo all three and once more.
    assert press(page, "Enter") == "k3"
    assert press(page, "3") == "k4"
    assert press(page, "s") == "k5"  # the skipped item does not come straight back
    assert "waits in the 'Skipped' queue" in page.inner_text("#annotate-progress")
    for back in ("k4", "k3", "k1"):
        press(page, "u", until=back)
        assert "Which team should answer?" in page.inner_text("#question-text")
    page.keyboard.press("u")
    shows(page, "#annotate-progress", "Nothing left to undo in this session")
    assert shown_id(page) == "k1" and "Which team should answer?" in page.inner_text("#question-text")
    assert team_answers(db) == {}
    # Then for good: accept k1, pick for k3, skip k4, pick for k5.
    given = {"k1": model_answer(page)}
    assert press(page, "Enter") == "k3"
    given["k3"] = TEAMS[2]
    assert press(page, "3") == "k4"
    assert press(page, "s") == "k5"
    given["k5"] = TEAMS[1]
    page.keyboard.press("2")
    said = shows(page, "#annotate-progress", "Nothing left in this queue.")
    assert "you skipped 1 (choose the 'Skipped' queue to see it again)" in said, said
    # The Skipped queue brings k4 back.
    start(page, "team", "Skipped (the items you skipped)")
    page.wait_for_function("document.querySelector('#item .dj-id')?.innerText === 'item k4'")
    focus_page(page)
    given["k4"] = TEAMS[0]
    page.keyboard.press("1")
    shows(page, "#annotate-progress", "no skipped items for team")
    assert team_answers(db) == given
    return given


def review(page) -> None:
    page.get_by_role("tab", name="Review").click()
    page.locator("#review-refresh").click()
    shows(page, "#review-summary", "team")
    # The page loaded before anything was answered; Refresh has run once that sentence is gone.
    until(
        page,
        "!(document.querySelector('#review-disagreements-empty')?.innerText || '').includes('No item has a human')"
        " && !document.querySelector('#review-disagreements-empty .progress-text')",
        "the review tables refreshed after the answers",
    )
    assert page.locator("#review-summary thead th").all_inner_texts()[:2] == ["question", "answered"]
    table_or_sentence(page, "#review-disagreements", "#review-disagreements-empty")
    table_or_sentence(page, "#review-unsure", "#review-unsure-empty")
    choose(page, "#cal-question", "team")
    until(page, "document.querySelector('#cal-run input').value === '2'", "run 2 (made since the page loaded)")
    page.locator("#cal-go").click()
    note = shows(page, "#cal-note", "Answers used:")
    assert "(4 items" in note, note
    assert "ECE" in page.inner_text("#cal-summary")
    page.locator("#agree-go").click()
    shows(page, "#agreement-empty", "No item has answers from two annotators yet")
    assert not page.locator("#agreement").is_visible()
    page.locator("#compare-go").click()
    table_or_sentence(page, "#comparison", "#comparison-empty")
    # Change an answer by the id on its card.
    page.locator("#review-item input, #review-item textarea").first.fill("k5")
    choose(page, "#review-question", "team")
    page.locator("#review-value input, #review-value textarea").first.fill("account")
    page.locator("#review-change").click()
    shows(page, "#review-note", "Item k5, team: changed to account.")


def check_export(rows: list[dict], answers: dict[str, str]) -> None:
    """One row per answered item, with its answer, its text once, and its context with the hidden gold."""
    by_id = {row["id"]: row for row in rows}
    assert sorted(by_id) == sorted(answers)
    for key, row in by_id.items():
        assert row["team"] == answers[key], (key, row)
        fields = row["fields"] if isinstance(row["fields"], dict) else json.loads(row["fields"])
        assert row["text"] == BODIES[key]
        assert sum(str(v).count(BODIES[key]) for k, v in row.items() if k != "fields") == 1, row
        assert "body" not in fields and BODIES[key] not in json.dumps(fields), fields
        assert fields["expected_team"] == GOLD[key] and set(fields) == {"subject", "plan", "expected_team"}, fields


def team_answers(db: Database) -> dict[str, str]:
    with db.read() as session:
        rows = session.execute(
            select(repo.Item.external_id, Response.value)
            .join(repo.Item, repo.Item.id == Response.item_id)
            .join(Question, Question.id == Response.question_id)
            .join(Project, Project.id == repo.Item.project_id)
            .where(Question.key == "team", Project.name == OWN, Response.status == "submitted")
        ).all()
    return dict(rows)


def test_the_first_hour_on_a_fresh_database(browser, tmp_path, dgemma_engine, monkeypatch):
    monkeypatch.delenv("DIFFJEV_PROJECT", raising=False)
    db_path = tmp_path / "first-hour.db"
    db = Database(db_path)
    walk_the_demo(browser, db, dgemma_engine)

    create_own_project(db_path, tmp_path)
    monkeypatch.setenv("DIFFJEV_PROJECT", OWN)
    assert ensure_project(db) == (OWN, False)
    csv_path = tmp_path / "helpdesk.csv"
    csv_path.write_bytes(OWN_CSV)
    server, _ = serve_studio(db, dgemma_engine, name=OWN)
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1800})
        page.goto(server.url)
        save_schema(page)
        import_with_a_bad_row(page, csv_path)
        prelabel_own(page)
        given = annotate_by_keyboard(page, db)
        review(page)
        answers = {**given, "k5": "account"}
        from_csv = list(csv.DictReader(download(page, "csv").splitlines()))
        from_jsonl = [json.loads(line) for line in download(page, "jsonl").splitlines()]
    check_export(from_csv, answers)
    check_export(from_jsonl, answers)
    assert team_answers(db) == answers
    with db.read() as session:
        sources = dict(
            session.execute(
                select(repo.Item.external_id, Response.source)
                .join(repo.Item, repo.Item.id == Response.item_id)
                .join(Question, Question.id == Response.question_id)
                .where(Question.key == "team")
            ).all()
        )
    assert sources["k1"] == "accepted"
