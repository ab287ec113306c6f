"""The Review tab: per-question acceptance and model accuracy, disagreements, low-confidence accepts,
changing an item's answer (recorded as an event), calibration with its reliability diagram and
auto-accept curve, and the comparison of runs."""

from __future__ import annotations

from typing import Any

import gradio as gr
import pandas as pd

from sqlalchemy import func, or_, select

from diffjev import calibration as cal
from diffjev.io import write_csv
from diffjev.services import annotation, calibration, review
from diffjev.services.exporting import csv_escape_setting
from diffjev.services.prelabel import prelabel
from storage import repo
from storage.models import Item, ItemRead, Run
from diffjev.ui.context import Scope, Studio, md_text, refusal
from diffjev.ui.data import LATEST, LATEST_LABEL, keep_pick, pick_of, run_choices
from diffjev.spans import span_words

PLOT_POINTS = 200
HIDDEN = "hidden"  # kept in the page, out of sight: a table with no rows would show placeholder headers
# One colour per series in every plot: the model's accuracy is the same blue in the reliability diagram and
# in the auto-accept curve, and no other series takes that colour.
SERIES_COLOURS = {
    "accuracy": "#1f77b4",
    "accuracy, 95% lower bound": "#9ecae1",
    "perfect calibration": "#9e9e9e",
    "share accepted": "#ff7f0e",
    "items": "#8c6d31",
}
RELIABILITY_GUIDE = (
    "*Reading it*: each point is one bin of items with similar confidence (the bars count them); below "
    "the grey diagonal the model is more confident than it is right, above it less; a bin of few items "
    "is noisy."
)
CURVE_GUIDE = (
    "*Reading it*: accepting every suggestion at or above a threshold takes the orange share of items, "
    "right as often as the blue line; the light blue line is the 95% lower bound, which a threshold must "
    "meet to be recommended. Hover a point for the items behind it."
)


def run_number(value: Any) -> int:
    """A run id as chosen (the list holds the project's runs; an API client may send anything)."""
    try:
        return int(value)
    except (TypeError, ValueError):
        raise refusal(f"run {value!r} is not a run number; choose a run from the list") from None


def build(studio: Studio, opened: gr.Tab | None = None) -> None:
    """The tab's parts; `opened`, the tab itself, refreshes its run lists each time it is opened."""
    with gr.Row():
        run_pick = gr.Dropdown(
            [(LATEST_LABEL, LATEST)], value=LATEST, label="Model answers from", elem_id="review-run", scale=3
        )
        refresh = gr.Button("Refresh", elem_id="review-refresh", scale=1)
    summary = gr.Dataframe(label="Per question", interactive=False, elem_id="review-summary")
    gr.Markdown("**Model and human disagree**")
    disagree = gr.Dataframe(label="Model and human disagree", interactive=False, elem_id="review-disagreements")
    disagree_why = gr.Markdown(elem_id="review-disagreements-empty")
    gr.Markdown(f"**Accepted while the model was unsure** (confidence < {review.LOW_CONFIDENCE})")
    unsure = gr.Dataframe(
        label=f"Accepted while the model was unsure (confidence < {review.LOW_CONFIDENCE})",
        interactive=False,
        elem_id="review-unsure",
    )
    unsure_why = gr.Markdown(elem_id="review-unsure-empty")
    gr.Markdown("**Change an answer**")
    with gr.Row():
        item = gr.Textbox(label="Item, its id as on the card (e.g. t17)", elem_id="review-item")
        # question lists are filled when the page loads (nothing of the project before a login)
        question = gr.Dropdown([], label="Question", allow_custom_value=True, elem_id="review-question")
        value = gr.Textbox(label="New answer", elem_id="review-value")
        change = gr.Button("Change", elem_id="review-change")
    note = gr.Markdown(elem_id="review-note")

    gr.Markdown(
        "**Calibration**: can the model's confidence be trusted? Computed on items with a human "
        "answer; blind-slice answers are used alone when there are enough of them."
    )
    with gr.Row():
        cal_question = gr.Dropdown([], label="Question", allow_custom_value=True, elem_id="cal-question")
        cal_run = gr.Dropdown([], label="Run", allow_custom_value=True, elem_id="cal-run")  # checked by the service
        target = gr.Number(0.95, label="Target accuracy for auto-accept", elem_id="cal-target")
        go = gr.Button("Calibrate", elem_id="cal-go")
    # Tables filled by a button start hidden: an empty table would show placeholder headers "1 2 3".
    # (Hidden, not invisible: an invisible component is not in the page until it is shown.)
    cal_summary = gr.Dataframe(label="Calibration", interactive=False, visible=HIDDEN, elem_id="cal-summary")
    with gr.Row():
        with gr.Column():
            diagram = gr.LinePlot(
                x="confidence",
                y="accuracy",
                color="series",
                color_map=SERIES_COLOURS,
                tooltip=["series", "confidence", "accuracy", "items"],
                label="Reliability diagram",
                elem_id="reliability",
            )
            bin_counts = gr.BarPlot(
                x="confidence bin",
                y="items",
                color="series",
                color_map=SERIES_COLOURS,
                sort="x",
                x_label_angle=-45,
                label="Items per bin",
                elem_id="reliability-counts",
            )
            gr.Markdown(RELIABILITY_GUIDE, elem_id="reliability-guide")
        with gr.Column():
            curve = gr.LinePlot(
                x="threshold",
                y="value",
                color="measure",
                color_map=SERIES_COLOURS,
                tooltip=["measure", "threshold", "value", "items accepted"],
                label="Auto-accept curve",
                elem_id="auto-accept",
            )
            gr.Markdown(CURVE_GUIDE, elem_id="auto-accept-guide")
    cal_note = gr.Markdown(elem_id="cal-note")
    keep = gr.Button("Keep this temperature for the run", elem_id="cal-keep")
    relabel = gr.Button("New run over the unlabeled items", elem_id="cal-relabel")
    gr.Markdown(
        "**Annotator agreement**: items two annotators both answered (the *second opinion* queue "
        "sends an item to a second annotator where the first disagreed with the model)."
    )
    agree = gr.Button("Compute agreement", elem_id="agree-go")
    agreement = gr.Dataframe(label="Agreement", interactive=False, visible=HIDDEN, elem_id="agreement")
    agree_diff = gr.Dataframe(
        label="Where annotators differ", interactive=False, visible=HIDDEN, elem_id="agreement-differ"
    )
    agree_why = gr.Markdown(elem_id="agreement-empty")
    gr.Markdown("**Model comparison**: every run over the same items, against the same human answers.")
    compare = gr.Button("Compare runs", elem_id="compare-go")
    comparison = gr.Dataframe(label="Runs compared", interactive=False, visible=HIDDEN, elem_id="comparison")
    comparison_why = gr.Markdown(elem_id="comparison-empty")
    comparison_csv = gr.DownloadButton("Download CSV", visible=False, elem_id="comparison-csv")

    def reviewing(request: gr.Request) -> Scope:
        scope = studio.scope(request)
        scope.require_reviewer("Review")
        return scope

    def runs(picked: Any = None, request: gr.Request = None) -> Any:
        """The project's runs, the picked one kept while it exists, else the newest that has read items (a
        run that read nothing has nothing to calibrate), else the newest."""
        scope = studio.scope(request)
        if not scope.may_review():
            return gr.update(choices=[], value=None)
        with studio.db.read() as session:
            ids = list(session.scalars(select(Run.id).where(Run.project_id == scope.project_id).order_by(Run.id)))
            with_reads = session.scalar(
                select(func.max(ItemRead.run_id)).where(ItemRead.run_id.in_(ids), ItemRead.status == "ok")
            )
        kept = next((i for i in ids if str(i) == str(picked)), None)
        fallback = with_reads if with_reads is not None else (ids[-1] if ids else None)
        return gr.update(choices=ids, value=kept if kept is not None else fallback)

    def calibrate(key: str, run_id: int | None, target_accuracy: float, request: gr.Request) -> tuple:
        scope = reviewing(request)
        if not key or run_id is None:
            return gr.update(value=None, visible=HIDDEN), None, None, None, "Choose a question and a run to calibrate."
        if target_accuracy is None or not 0 < float(target_accuracy) <= 1:
            raise gr.Error("Give the target accuracy as a share between 0 and 1, e.g. 0.95.")
        try:
            found = calibration.calibrate(studio.db, scope.project, run_number(run_id), key)
        except repo.NotFound as exc:
            raise refusal(exc) from None
        if found is None:
            nothing = "No item has a human answer for this question yet: answer some on the Annotate tab."
            return gr.update(value=None, visible=HIDDEN), None, None, None, nothing
        shown = found.curve[:: max(1, len(found.curve) // PLOT_POINTS)] + found.curve[-1:]  # a drawable number
        note = accept_note(found.curve, target_accuracy)
        note += f" Answers used: {found.answers_used} ({found.n} items, {found.blind_n} blind)."
        return (
            gr.update(value=pd.DataFrame([found.summary()]), visible=True),
            reliability_points(found.bins),
            bin_bars(found.bins),
            curve_points(shown),
            note,
        )

    def compare_runs(request: gr.Request) -> tuple[Any, Any, str]:
        scope = reviewing(request)
        rows = calibration.compare_runs(studio.db, scope.project)
        if not rows:
            hidden, why = table_or_why(rows, review.why_empty(studio.db, scope.project)["comparison"])
            return hidden, gr.update(visible=False), why
        table = pd.DataFrame(rows)
        path = studio.export_target(f"{scope.project}-runs-compared.csv")
        # The export's CSV writer: atomic, and formula cells escaped (a model name is anyone's text).
        cells = table.astype(object).where(table.notna(), None).itertuples(index=False)
        write_csv(path, [str(c) for c in table.columns], cells, escape=csv_escape_setting())
        return (
            gr.update(value=table, visible=True),
            gr.update(value=studio.offer_download(path, scope.project), visible=True),
            "",
        )

    def keep_temperature(key: str, run_id: int | None, request: gr.Request) -> str:
        scope = reviewing(request)
        try:
            run_id = run_number(run_id) if run_id is not None else None
            found = calibration.calibrate(studio.db, scope.project, run_id, key) if key and run_id else None
            if found is None or found.temperature is None:
                return "⚠️ Too few answered items to fit a temperature (at least ten)."
            project_id, _, rows, _ = studio.schema(scope)
            calibration.store_temperature(
                studio.db, project_id, int(run_id), rows[key], found.temperature, found.n, scope.user
            )
        except repo.NotFound as exc:
            return f"⚠️ {md_text(str(exc))}"
        return (
            f"Kept temperature {found.temperature:.3f} for run {int(run_id)}, {md_text(key)}: the Annotate "
            f"tab shows calibrated confidence beside the model's own."
        )

    def agreement_tables(request: gr.Request) -> tuple[Any, Any, str]:
        scope = reviewing(request)
        table, differing = review.agreement(studio.db, scope.project)
        why = review.why_empty(studio.db, scope.project)
        shown, why_none = table_or_why(table, why["agreement"])
        if not table:
            return shown, gr.update(value=None, visible=HIDDEN), why_none
        return (shown, *table_or_why(differing, why["agreement differ"]))

    def new_run(request: gr.Request, progress=gr.Progress()) -> str:
        """The re-labeling loop: read the items nobody has answered yet with the studio's engine; the new run
        keeps the temperatures kept for the last run of that engine, so it shows calibrated at once."""
        scope = reviewing(request)
        result = prelabel(
            studio.db,
            scope.project,
            studio.engine(),
            only_unlabeled=True,
            actor=scope.user,
            progress=lambda p: progress((p.done, p.total), desc=f"{p.items_per_s:.1f} items/s"),
        )
        return (
            f"Run {result.run_id} {result.status}: {result.read} unlabeled items read, {result.failed} failed; "
            f"its suggestions show calibrated where a temperature was kept. (A run over all items, from the "
            f"Pre-label tab, also fills the *changed since answered* queue.)"
        )

    studio.on_load.append((runs, [], [cal_run]))
    if opened is not None:  # a run made since the page loaded (in the Pre-label tab) is listed at once
        opened.select(runs, [cal_run], [cal_run], api_visibility="private", show_progress="hidden")

        def listed(picked: Any, request: gr.Request) -> Any:
            choices = run_choices(studio, studio.scope(request))
            return gr.update(choices=choices, value=picked if picked in {c[1] for c in choices} else LATEST)

        opened.select(listed, [run_pick], [run_pick], api_visibility="private", show_progress="hidden")
    relabel.click(new_run, [], [cal_note], api_name="relabel_run")
    keep.click(keep_temperature, [cal_question, cal_run], [cal_note], api_name="keep_temperature")
    agree.click(agreement_tables, [], [agreement, agree_diff, agree_why], api_name="agreement")
    go.click(
        calibrate,
        [cal_question, cal_run, target],
        [cal_summary, diagram, bin_counts, curve, cal_note],
        api_name="calibrate",
    )
    compare.click(compare_runs, [], [comparison, comparison_csv, comparison_why], api_name="compare_runs")

    def tables(request: gr.Request) -> tuple[Any, ...]:
        columns = ["item", "question", "model", "confidence", "human", "annotator", "source"]
        scope = studio.scope(request)
        if not scope.may_review():  # the page's load: an annotator's page keeps the tab empty
            return tuple(gr.update() for _ in review_tables)
        run = pick_of(studio, "review", request)  # None: each item's latest read
        project = scope.project
        try:
            why = review.why_empty(studio.db, project, run)
            return (
                pd.DataFrame(review.question_report(studio.db, project, run)),
                *table_or_why(
                    with_span_words(studio, scope, review.disagreements(studio.db, project, run=run)),
                    why["disagreements"],
                    columns,
                ),
                *table_or_why(
                    with_span_words(studio, scope, review.low_confidence_accepts(studio.db, project, run=run)),
                    why["unsure"],
                    columns,
                ),
            )
        except repo.NotFound as exc:  # the picked run was deleted meanwhile
            raise refusal(exc) from None

    def reopen(shown: str | None, key: str, answer: str, request: gr.Request) -> str:
        scope = reviewing(request)
        shown = str(shown or "").strip()
        if not shown or not key:
            return "⚠️ Give the item's id, as its card shows it, and the question."
        try:
            review.reopen(studio.db, scope.project, shown, key, answer.strip(), scope.user)
        except (ValueError, repo.NotFound) as exc:  # an answer not in the question, an item not in the project
            return f"⚠️ {md_text(str(exc))}"
        return f"Item {md_text(shown)}, {md_text(key)}: changed to {md_text(answer.strip())}."

    def questions(request: gr.Request) -> Any:
        return gr.update(choices=[q.id for q in studio.schema(studio.scope(request))[1].questions])

    def first_question(request: gr.Request) -> Any:
        """The question list with its first question chosen, so Calibrate has one without a pick."""
        ids = [q.id for q in studio.schema(studio.scope(request))[1].questions]
        return gr.update(choices=ids, value=ids[0] if ids else None)

    studio.on_load.append((questions, [], [question]))
    studio.on_load.append((first_question, [], [cal_question]))
    review_tables = [summary, disagree, disagree_why, unsure, unsure_why]
    refresh.click(tables, [], review_tables, api_name="review")
    if opened is not None:  # answers given since the page loaded (on the Annotate tab) count at once
        opened.select(tables, [], review_tables, api_visibility="private", show_progress="hidden")
    change.click(reopen, [item, question, value], [note], api_name="review_change")
    studio.on_load.append((tables, [], review_tables))

    def runs_listed(request: gr.Request) -> Any:
        return gr.update(choices=run_choices(studio, studio.scope(request)), value=LATEST)

    studio.on_load.append((runs_listed, [], [run_pick]))
    keep_pick(studio, "review", run_pick)


def reliability_points(bins: list[cal.Bin]) -> pd.DataFrame:
    """The diagram's points, each with the items behind it; the diagonal is perfect calibration."""
    return pd.DataFrame(
        [{"confidence": b.confidence, "accuracy": b.accuracy, "items": b.count, "series": "accuracy"} for b in bins]
        + [{"confidence": x, "accuracy": x, "items": None, "series": "perfect calibration"} for x in (0.0, 1.0)]
    )


def bin_bars(bins: list[cal.Bin]) -> pd.DataFrame:
    """Items per reliability bin, labelled by the bin's mean confidence (bins are equal-mass, so the bars
    show where the confidences crowd; ties of the label get the bin's rank)."""
    return pd.DataFrame(
        [
            {"confidence bin": f"{n + 1:02d}: {b.confidence:.3f}", "items": b.count, "series": "items"}
            for n, b in enumerate(bins)
        ]
    )


def curve_points(points: list[cal.AcceptPoint]) -> pd.DataFrame:
    """Share accepted, accuracy and its 95% lower bound per threshold, each with the items accepted there."""
    rows = []
    for p in points:
        for measure, value in (
            ("share accepted", p.coverage),
            ("accuracy", p.accuracy),
            ("accuracy, 95% lower bound", p.low),
        ):
            rows.append({"threshold": p.threshold, "value": value, "measure": measure, "items accepted": p.accepted})
    return pd.DataFrame(rows)


def accept_note(curve: list[cal.AcceptPoint], target: float) -> str:
    """The threshold to use, only where the 95% interval of its accuracy meets the target; otherwise how
    many more answers would show it, or that no threshold reaches the target."""
    found = cal.recommend(curve, float(target))
    if found.point is not None:
        p = found.point
        return (
            f"Accepting every suggestion with confidence ≥ **{p.threshold:.3f}** would take **{p.coverage:.0%}** "
            f"of these items ({p.accepted}) at **{p.accuracy:.1%}** accuracy (95% interval {p.low:.1%}–{p.high:.1%}, "
            f"at or above the {share(target)} target)."
        )
    if found.closest is not None:
        p = found.closest
        return (
            f"No threshold is sure to reach {share(target)} yet. The closest: ≥ {p.threshold:.3f} is right on "
            f"{p.accuracy:.1%} of its **{p.accepted}** items, but the 95% interval is {p.low:.1%}–{p.high:.1%}. "
            f"About **{found.more_needed} more** answered items at that confidence, as accurate, would show "
            f"it; answer more on the Annotate tab and calibrate again."
        )
    if target >= 1:
        return "No number of answers can show 100% accuracy; enter a target below 1, e.g. 0.95."
    return f"No threshold reaches {share(target)} accuracy on these items, whatever the number of answers."


def share(value: float) -> str:
    """A target as the user entered it: 0.95 is 95%, 0.975 is 97.5%."""
    return f"{value * 100:g}%"


def with_span_words(studio: Studio, scope: Scope, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Answer rows with each span answer's model and human values shown as their words and offsets
    ("“Acme Pro” (53-61)" rather than "53-61"): offsets alone tell a reviewer nothing."""
    kinds = {q.id: q.kind for q in studio.schema(scope)[1].questions if annotation.is_span_question(q)}
    spanned = {row["item"] for row in rows if row["question"] in kinds}
    if not spanned:
        return rows
    texts = item_texts(studio, scope, spanned)

    def shown(row: dict[str, Any]) -> dict[str, Any]:
        kind, text = kinds[row["question"]], texts.get(row["item"])
        return {
            **row,
            **{
                side: row[side] if row[side] is None or text is None else span_words(row[side], text, kind)
                for side in ("model", "human")
            },
        }

    return [shown(row) if row["question"] in kinds else row for row in rows]


def item_texts(studio: Studio, scope: Scope, shown_ids: set[str]) -> dict[str, str]:
    """The texts of the scope's project's items, by the id their cards show (review.shown_id)."""
    numbers = [int(shown) for shown in shown_ids if shown.isdigit()]
    query = select(Item.id, Item.external_id, Item.text).where(
        Item.project_id == scope.project_id, or_(Item.external_id.in_(shown_ids), Item.id.in_(numbers))
    )
    with studio.db.read() as session:
        return {review.shown_id(i, external): text for i, external, text in session.execute(query)}


def table_or_why(rows: list[dict[str, Any]], why_empty: str, columns: list[str] | None = None) -> tuple[Any, str]:
    """A table and an empty note, or, when it has no rows, the table hidden and the sentence saying why:
    an empty table would show only placeholder headers."""
    if rows:
        return gr.update(value=pd.DataFrame(rows, columns=columns), visible=True), ""
    return gr.update(value=None, visible=HIDDEN), f"*{why_empty}*"
