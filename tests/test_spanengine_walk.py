"""The span walk, sentence windows and the re-read policy, over the real Gemma tokenizer.

A read is simulated by blank rows that spell given tokens: the walk must find exactly the substring they
spell, and whatever the rows hold, every span it returns is an exact slice of the text."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diffjev.spans import (
    MAX_READS,
    TextTokens,
    read_span_answer,
    sentence_windows,
    snap_to_text,
    tokenize_text,
    walk_spans,
)

END, SEP = 106, 107
NONE = (5396,)
SURE, UNSURE = -0.01, -9.0


def rows_spelling(parts: list[list[int]], blank: int, columns: set[int], sure: bool = True) -> list[dict[int, float]]:
    """Blank rows whose likeliest tokens spell `parts` joined by the separator, then the end token."""
    wanted: list[int] = []
    for n, part in enumerate(parts):
        wanted += ([SEP] if n else []) + part
    wanted.append(END)
    rows = []
    for j in range(blank):
        row = {c: UNSURE if sure else -2.5 for c in columns}
        if j < len(wanted):
            row[wanted[j]] = SURE if sure else -2.0
        rows.append(row)
    return rows


def walk(tokens: TextTokens, rows, kind="span"):
    return walk_spans(rows, tokens, kind, end_ids=(END,), none_ids=NONE, separator_id=SEP)


PIECES = st.one_of(
    st.characters(codec="utf-8", exclude_categories=("Cs",)),
    st.sampled_from(["é", "e\u0301", "👍🏽", "👩\u200d💻", "🫖", "\r\n", " ", ".", "Kettle", "東京"]),
)
TEXTS = st.lists(PIECES, min_size=1, max_size=30).map("".join)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXTS, data=st.data())
def test_walk_finds_the_spelled_substring_and_its_offsets_match(tokenizer, text, data):
    tokens = tokenize_text(tokenizer, text)
    edges = [a for a in range(len(tokens.ids)) if text[slice(*tokens.offsets[a])].strip()]
    if not edges:
        return
    first = data.draw(st.sampled_from(edges))
    last = data.draw(st.sampled_from([a for a in edges if a >= first][:6]))
    columns = set(tokens.ids) | {END, SEP, *NONE}
    found = walk(tokens, rows_spelling([list(tokens.ids[first : last + 1])], 24, columns))
    assert len(found.spans) == 1
    span = found.spans[0]
    assert span.text == text[span.start : span.end] and span.text.strip() == span.text and span.text
    # It covers what the rows spelled (where the same tokens occur twice, either place), widened only to
    # whole characters and trimmed of white space.
    spelled = tokens.ids[first : last + 1]
    places = [a for a in edges if tokens.ids[a : a + len(spelled)] == spelled]
    ranges = {snap_to_text(text, tokens.offsets[a][0], tokens.offsets[a + len(spelled) - 1][1]) for a in places}
    assert (span.start, span.end) in ranges
    assert span.coverage == 1.0 and found.confidence > 0.9 / len(places)  # shared between equal places


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXTS, seed=st.integers(0, 2**16))
def test_any_read_gives_exact_slices_in_order(tokenizer, text, seed):
    import random

    tokens = tokenize_text(tokenizer, text)
    rng = random.Random(seed)
    columns = sorted(set(tokens.ids) | {END, SEP, *NONE})
    rows = [{c: rng.uniform(-12, 0) for c in columns} for _ in range(12)]
    for kind in ("span", "spans"):
        found = walk(tokens, rows, kind)
        assert 0.0 <= found.confidence <= 1.0
        for s in found.spans:
            assert 0 <= s.start < s.end <= len(text) and text[s.start : s.end] == s.text
        assert all(a.end <= b.start for a, b in zip(found.spans, found.spans[1:]))


def test_spans_walk_reads_several_in_order_and_none(tokenizer):
    text = "Ship the Blue Kettle and two Red Mugs to Oslo."
    tokens = tokenize_text(tokenizer, text)
    columns = set(tokens.ids) | {END, SEP, *NONE}

    def ids_of(word):
        start = text.index(word)
        return [t for t, (a, b) in zip(tokens.ids, tokens.offsets) if a >= start - 1 and b <= start + len(word)]

    found = walk(tokens, rows_spelling([ids_of("Blue Kettle"), ids_of("Red Mugs")], 24, columns), "spans")
    assert [s.text for s in found.spans] == ["Blue Kettle", "Red Mugs"]
    assert [text[s.start : s.end] for s in found.spans] == ["Blue Kettle", "Red Mugs"]
    nothing = walk(tokens, rows_spelling([list(NONE)], 24, columns))
    assert nothing.spans == () and nothing.confidence > 0.5


def test_crlf_and_combining_marks_stay_whole(tokenizer):
    text = "Line one\r\nCafe\u0301 au lait\r\n"
    tokens = tokenize_text(tokenizer, text)
    columns = set(tokens.ids) | {END, SEP, *NONE}
    start = text.index("Cafe")
    spelled = [t for t, (a, b) in zip(tokens.ids, tokens.offsets) if start <= a < len(text) - 2]
    found = walk(tokens, rows_spelling([spelled], 24, columns))
    assert found.spans[0].text == "Cafe\u0301 au lait"


def test_windows_cover_the_text_once_and_cut_between_sentences(tokenizer):
    text = " ".join(f"Sentence number {n} talks about item {n}." for n in range(30))
    tokens = tokenize_text(tokenizer, text)
    windows = sentence_windows(tokens, max_tokens=32, max_ids=100)
    assert len(windows) > 3
    assert windows[0][0] == 0 and windows[-1][1] == len(text)
    assert all(a[1] == b[0] for a, b in zip(windows, windows[1:]))  # touching: each character once
    for a, b in windows[:-1]:
        assert text[a:b].rstrip().endswith(".")  # cut after a sentence, never inside one
        assert len(tokenize_text(tokenizer, text[a:b]).ids) <= 32 + 1


def test_a_sentence_longer_than_a_window_is_cut_between_tokens(tokenizer):
    text = "word " * 100
    windows = sentence_windows(tokenize_text(tokenizer, text), max_tokens=16, max_ids=100)
    assert len(windows) >= 6 and "".join(text[a:b] for a, b in windows) == text


class FakeBuilder:
    """Stands in for SpanCanvasBuilder: canvases are (window text, seed); the reads are scripted."""

    def __init__(self, tokenizer, max_tokens=64):
        self.tokenizer = tokenizer
        self.end_ids, self.none_ids, self.separator_id = (END,), NONE, SEP
        self.steps = 4
        self.max_tokens = max_tokens

    def window_limits(self, question):
        return self.max_tokens, 120

    def blank_length(self, question):
        return 24

    def build(self, question, window, seed):
        return SimpleNamespace(window=window, seed=seed)


def scripted_reads(answers):
    """read_blanks that spells `answers[(word in window, read number)]` or 'none', sure or not."""
    seen: dict[str, int] = {}
    log = []

    def read_blanks(canvases):
        out = []
        for c in canvases:
            key = c.window.text
            seen[key] = seen.get(key, 0) + 1
            log.append((key, c.seed))
            word, sure = answers(c.window.text, seen[key])
            tokens = c.window
            columns = set(tokens.ids) | {END, SEP, *NONE}
            if word is None:
                out.append(rows_spelling([list(NONE)], 24, columns, sure))
                continue
            at = c.window.text.index(word)
            ids = [t for t, (a, b) in zip(tokens.ids, tokens.offsets) if at - 1 <= a and b <= at + len(word) and b > a]
            out.append(rows_spelling([ids], 24, columns, sure))
        return out

    return read_blanks, log


QUESTION = SimpleNamespace(id="product", kind="span", instructions="Which product?", max_items=None)


def test_a_sure_first_read_is_not_read_again(tokenizer):
    read_blanks, log = scripted_reads(lambda text, n: ("Kettle", True))
    answer = read_span_answer(QUESTION, "The Kettle leaks.", 42, FakeBuilder(tokenizer), read_blanks)
    assert answer.reads == 1 and len(log) == 1 and answer.spans[0].text == "Kettle"


def test_an_unsure_read_is_read_again_with_new_seeds_up_to_three_reads(tokenizer):
    read_blanks, log = scripted_reads(lambda text, n: ("Kettle", False))
    answer = read_span_answer(QUESTION, "The Kettle leaks.", 42, FakeBuilder(tokenizer), read_blanks)
    assert answer.reads == MAX_READS == 3
    assert len({seed for _, seed in log}) == 3  # each re-read with its own seed
    assert answer.confidence < 0.3 and answer.spans[0].text == "Kettle"


def test_a_re_read_stops_once_sure_and_keeps_the_surer_read(tokenizer):
    read_blanks, log = scripted_reads(lambda text, n: ("Kettle", False) if n == 1 else ("leaks", True))
    answer = read_span_answer(QUESTION, "The Kettle leaks.", 42, FakeBuilder(tokenizer), read_blanks)
    assert answer.reads == 2 and len(log) == 2
    assert answer.spans[0].text == "leaks" and answer.confidence >= 0.3


def test_the_best_window_wins_and_offsets_are_in_the_whole_text(tokenizer):
    text = "Filler sentence one here. " * 6 + "The Blue Kettle broke. " + "More filler goes here. " * 6

    def answers(window, n):
        return ("Blue Kettle", True) if "Kettle" in window else (None, False)

    read_blanks, log = scripted_reads(answers)
    answer = read_span_answer(QUESTION, text, 42, FakeBuilder(tokenizer, max_tokens=24), read_blanks)
    assert answer.windows > 2
    (span,) = answer.spans
    assert text[span.start : span.end] == "Blue Kettle" == span.text
    assert span.start == text.index("Blue Kettle")


def test_spans_join_windows_in_text_order(tokenizer):
    text = "First the Red Mug came. " + "Filler words go here now. " * 5 + "Then the Blue Kettle came."
    question = SimpleNamespace(id="products", kind="spans", instructions="Products?", max_items=None)

    def answers(window, n):
        for word in ("Red Mug", "Blue Kettle"):
            if word in window:
                return word, True
        return None, True

    read_blanks, _ = scripted_reads(answers)
    answer = read_span_answer(question, text, 42, FakeBuilder(tokenizer, max_tokens=24), read_blanks)
    assert [s.text for s in answer.spans] == ["Red Mug", "Blue Kettle"]
    assert all(text[s.start : s.end] == s.text for s in answer.spans)
    assert answer.answer == ",".join(f"{s.start}-{s.end}" for s in answer.spans)


@pytest.mark.parametrize("text", ["", "   "])
def test_empty_text_reads_none(tokenizer, text):
    read_blanks, _ = scripted_reads(lambda window, n: (None, True))
    answer = read_span_answer(QUESTION, text, 42, FakeBuilder(tokenizer), read_blanks)
    assert answer.spans == () and answer.answer == "none"
