"""How the offline model reads: what its GGUF says it is, whole option names scored as continuations of a
per-question prompt, its accuracy on the demo's own expected answers, and the notice for a low label mass."""

import importlib.util
from pathlib import Path

import pytest
import torch

from diffjev import Schema
from diffjev.engines import AutoregressiveEngine
from diffjev.engines.autoregressive import OptionsRead
from diffjev.models import _offline_gguf_folder, gguf_facts
from diffjev.ui.annotate import low_mass_notice


def benchmark(name: str):
    """A script under benchmarks/, imported from its file (benchmarks/ is not a package)."""
    path = Path(__file__).parent.parent / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_offline_gguf_says_it_is_the_base_model_not_the_instruction_tuned_one():
    folder, name = _offline_gguf_folder()
    facts = gguf_facts(folder / name)
    assert facts["name"] == "Gemma 3 270m" and facts["basename"] == "gemma-3"
    assert facts["finetune"] is None and facts["has_chat_template"] is False
    assert facts["instruction_tuned"] is False


def test_a_gguf_with_a_chat_template_or_an_it_tag_is_read_as_instruction_tuned(tmp_path):
    import gguf

    def write(path, **fields):
        writer = gguf.GGUFWriter(str(path), "gemma3")
        for key, value in fields.items():
            writer.add_string(key, value)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.close()
        return path

    templated = write(tmp_path / "a.gguf", **{"general.name": "Gemma 3 270m", "tokenizer.chat_template": "{{x}}"})
    tagged = write(tmp_path / "b.gguf", **{"general.name": "Gemma 3 270m It", "general.finetune": "it"})
    base = write(tmp_path / "c.gguf", **{"general.name": "Gemma 3 270m"})
    assert gguf_facts(templated)["instruction_tuned"] and gguf_facts(tagged)["instruction_tuned"]
    assert not gguf_facts(base)["instruction_tuned"]
    suffixed = write(tmp_path / "d.gguf", **{"general.name": "gemma-3-270m-it"})
    toolkit = write(tmp_path / "e.gguf", **{"general.name": "Gemma Toolkit"})  # ends in the letters, not the tag
    assert gguf_facts(suffixed)["instruction_tuned"] and not gguf_facts(toolkit)["instruction_tuned"]


MULTI_TOKEN = {
    "instructions": "Payments questions.",
    "questions": [
        {
            "id": "method",
            "type": "choice",
            "instructions": "How did the customer pay?",
            "options": [
                {"name": "wire transfer"},
                {"name": "credit card", "description": "any card"},
                {"name": "cash"},
            ],
        },
        {"id": "refund", "type": "yes_no", "instructions": "Do they ask for a refund?"},
    ],
}


@torch.inference_mode()
def full_sequence_logprob(model, prompt, option):
    """The option's logprob after the prompt, from one plain forward pass over the whole sequence."""
    ids = prompt + option
    logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
    return sum(logprobs[len(prompt) - 1 + j, token].item() for j, token in enumerate(option))


def test_each_whole_option_scores_the_sum_of_its_tokens_logprobs(causal_lm, tokenizer):
    engine = AutoregressiveEngine(causal_lm, tokenizer, mode="options")
    schema = Schema.from_dict(MULTI_TOKEN)
    tokens = OptionsRead(engine, schema, "I paid by wire transfer last week and want my money back.")
    assert max(len(o) for o in tokens.options["method"]) > 1  # "wire transfer" is more than one token
    assert "- credit card (any card)" in tokenizer.decode(tokens.prompts["method"])  # options listed
    reads = engine.read_options(tokens)
    for qid, options in tokens.options.items():
        for i, option in enumerate(options):
            expected = full_sequence_logprob(causal_lm, tokens.prompts[qid], option)
            assert reads[qid].logprobs[i] == pytest.approx(expected, abs=1e-4)


def test_an_options_read_keeps_the_decision_shapes(causal_lm, tokenizer):
    from diffjev import read

    engine = AutoregressiveEngine(causal_lm, tokenizer, mode="options")
    d = read(Schema.from_dict(MULTI_TOKEN), "Paid cash.", engine)
    method = d.answers["method"]
    assert set(method.probabilities) == {"wire transfer", "credit card", "cash"}
    assert sum(method.probabilities.values()) == pytest.approx(1.0) and 0 < method.label_mass < 1
    assert d.diagnostics["engine"] == "autoregressive-options" and d.diagnostics["model_passes"] == 2


@pytest.fixture(scope="module")
def offline_demo_rows():
    engine = AutoregressiveEngine.offline()
    assert engine.mode == "options" and engine.instruction_tuned is False
    return {row["question"]: row for row in benchmark("offline_accuracy").demo_accuracy(engine)}


# Measured on the whole demo: team 0.62 (chance 0.33, majority 0.40); urgent 0.52 (majority 0.55) and tone
# 0.23 (majority 0.50) are not yet above chance with this 270M base model: known shortfalls, kept visible.
SHORT_OF_CHANCE = pytest.mark.xfail(strict=True, reason="the 270M base model reads this question no better than chance")


@pytest.mark.parametrize(
    "question", ["team", pytest.param("urgent", marks=SHORT_OF_CHANCE), pytest.param("tone", marks=SHORT_OF_CHANCE)]
)
def test_the_offline_model_answers_the_demo_question_above_chance(offline_demo_rows, question):
    row = offline_demo_rows[question]
    assert row["accuracy"] >= max(row["chance"], row["majority"]) + 0.1, row


def test_the_held_out_tickets_carry_an_answer_from_the_demo_schema_for_every_question():
    from diffjev.demo import EXPECTED_FIELDS, TICKETS_SCHEMA, demo_tickets

    tickets = benchmark("offline_accuracy").heldout_tickets()
    schema = Schema.from_dict(TICKETS_SCHEMA)
    assert len(tickets) == 24 and len({t["id"] for t in tickets}) == 24
    assert not {t["text"] for t in tickets} & {t["text"] for t in demo_tickets(60)}  # none of the demo's wording
    for q in schema.questions:
        answers = [t[EXPECTED_FIELDS[q.id]] for t in tickets]
        assert set(answers) == set(q.names), (q.id, answers)  # every option expected somewhere, nothing else


def test_the_low_label_mass_notice_says_how_little_and_what_to_do():
    assert low_mass_notice(0.0046) == (
        "  \n⚠ The model put 0.5% of its probability on these answers: treat this as a guess."
    )
    assert "less than 0.1% of its probability" in low_mass_notice(0.0004)
    assert "9.9% of its probability" in low_mass_notice(0.099)
    assert low_mass_notice(0.1) == low_mass_notice(0.93) == low_mass_notice(None) == ""


def test_the_options_reading_takes_one_read_per_item_and_no_second_pass(tmp_path, causal_lm, tokenizer):
    """The options reading draws no noise: a second run of "more draws" would only read the same again."""
    import pandas as pd

    from diffjev.demo import TICKETS_SCHEMA
    from diffjev.services.importing import import_items
    from diffjev.services.prelabel import prelabel_quick_first
    from storage import repo
    from storage.db import Database

    engine = AutoregressiveEngine(causal_lm, tokenizer, mode="options")
    assert not engine.draws_vary
    db = Database(tmp_path / "options.db")
    with db.session() as session:
        repo.create_project(session, "p", Schema.from_dict(TICKETS_SCHEMA), "t")  # samples "auto"
    import_items(db, "p", pd.DataFrame({"text": ["The site is down", "Refund my invoice"]}), actor="t")
    first, second = prelabel_quick_first(db, "p", engine)
    assert (first.status, first.read, second) == ("completed", 2, None)


def test_a_nearly_even_distribution_is_a_guess_whatever_is_picked():
    from diffjev.ui.annotate import guess_notice

    stars = {"1": 0.21, "2": 0.22, "3": 0.21, "4": 0.21, "5": 0.15}  # as a newcomer saw it: no warning
    said = guess_notice({"distribution": stars, "label_mass": 0.9})
    assert "nearly evenly" in said and "its top one has 22%" in said
    assert "nearly evenly" in guess_notice({"distribution": {"yes": 0.6, "no": 0.4}, "label_mass": 1.0})
    assert guess_notice({"distribution": {"yes": 0.7, "no": 0.3}, "label_mass": 1.0}) == ""
    assert "0.5% of its probability" in guess_notice({"distribution": {"yes": 0.9, "no": 0.1}, "label_mass": 0.005})
    assert guess_notice(None) == guess_notice({"distribution": {}, "label_mass": 1.0}) == ""
