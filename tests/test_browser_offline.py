"""The Annotate tab in a real browser says when the model put little probability on the answers at all: the
distribution drawn beside it is then renormalised from scraps, and the page says to treat it as a guess."""

from sqlalchemy import select

from storage.models import Suggestion
from studio_fixtures import choose, one_question_at_a_time, serve_studio, studio_db


def test_a_low_label_mass_is_named_beside_the_distribution(browser, tmp_path, dgemma_engine):
    # A random-weight model spreads its probability over the whole vocabulary: almost none on the labels.
    db = studio_db(tmp_path / "mass.db", ["The dashboard is down.", "Charged twice."], prelabel_with=dgemma_engine)
    with db.read() as session:
        masses = {s.item_id: s.label_mass for s in session.scalars(select(Suggestion))}
    assert max(masses.values()) < 0.001
    server, _ = serve_studio(db, dgemma_engine)
    with server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.goto(server.url)
        page.get_by_role("tab", name="Annotate").click()
        one_question_at_a_time(page)
        choose(page, "#annotate-question", "urgent")
        choose(page, "#annotate-queue", "Unlabeled, in order")
        page.locator("#annotate-start").click()
        page.wait_for_function("document.querySelector('#suggestion-info').innerText.includes('Model:')")
        info = page.inner_text("#suggestion-info")
        assert "less than 0.1% of its probability on these answers: treat this as a guess" in info
        assert page.locator("#distribution").is_visible()
