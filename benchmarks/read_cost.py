"""What one item's structured read costs, by number of questions k.

Compares, on backbones of the same size (random weights, the real 262k Gemma vocabulary):
- diffusion joint: every question on one seeded canvas, one DiffusionGemma pass (diffjev's read);
- diffusion joint (vLLM 0.33 joint: true): upstream's joint layout (numbered questions, `k: <noise>` answer
  lines), one pass per chunk of questions that fits the served canvas;
- diffusion per-question: one canvas read per question, as vLLM's own /v1/systemone reads DiffusionGemma;
- AR single: a causal LM scoring every slot in one pass, later slots seeing noise in earlier ones;
- AR sequential: a causal LM, one pass per slot with earlier slots filled, KV cache reused.

Model passes are counted with a forward hook on each backbone, not taken from the engines' word.
Run: python benchmarks/read_cost.py [--items 15] [--hidden 256] [--layers 4]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch

from diffjev import Schema, read
from diffjev.engines import AutoregressiveEngine, TransformersEngine
from diffjev.jev import question_canvas, read_joint
from diffjev.models import offline_gemma_tokenizer
from diffjev.tiny import tiny_causal_lm, tiny_diffusion_gemma

TICKET = (
    "Hello, since this morning none of our 40 seats can sign in. The login page spins and then shows "
    "'session expired'. We have a board demo at noon and the sales team cannot reach the dashboards. "
    "We already cleared caches and tried three browsers. Our invoice was also charged twice last week, "
    "but that can wait. Please tell us whether this is an outage on your side and when it will be fixed. "
    "This is the third time this quarter and people here are getting angry. Ticket ref 88231, plan: "
    "Business annual, region eu-west."
)


# The canvas the model is served with: diffjev's joint read and upstream's joint chunks both fit in it.
SERVED_WIDTH = 128


def schema_with(k: int) -> Schema:
    kinds = [
        {"type": "yes_no", "instructions": "Is a reply needed within the hour?"},
        {
            "type": "choice",
            "instructions": "Which team should handle it?",
            "options": ["billing", "technical", "account"],
        },
        {"type": "score", "instructions": "How upset is the customer?", "levels": ["calm", "annoyed", "furious"]},
    ]
    return Schema.from_dict({"questions": [{"id": f"q{i}", **kinds[i % 3]} for i in range(k)], "samples": 1})


def counter(module: torch.nn.Module) -> list[int]:
    calls = [0]
    module.register_forward_hook(lambda *a: calls.__setitem__(0, calls[0] + 1))
    return calls


def measure(runs: list[tuple[str, Callable[[int], None]]], items: int) -> dict[str, float]:
    """Median seconds per item for each run. The runs take turns item by item, so a shift in the
    machine's load during the measurement falls on all of them alike."""
    for _, fn in runs:
        fn(-1)  # warm-up
    times: dict[str, list[float]] = {label: [] for label, _ in runs}
    for i in range(items):
        for label, fn in runs:
            started = time.perf_counter()
            fn(i)
            times[label].append(time.perf_counter() - started)
    return {label: statistics.median(t) for label, t in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--items", type=int, default=15)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--ks", default="1,2,4,8,16")
    args = ap.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    tokenizer = offline_gemma_tokenizer()
    diffusion = TransformersEngine(
        tiny_diffusion_gemma(args.hidden, args.layers), tokenizer, batch_size=1, canvas_length=SERVED_WIDTH
    )
    causal = tiny_causal_lm(args.hidden, args.layers)
    single = AutoregressiveEngine(causal, tokenizer, mode="single", batch_size=1, canvas_length=128)
    sequential = AutoregressiveEngine(causal, tokenizer, mode="sequential", batch_size=1, canvas_length=128)
    d_calls, c_calls = counter(diffusion.model.model), counter(causal.model)
    one = schema_with(1)
    joint_len = len(diffusion.builder.build(one, TICKET, 42).prompt_ids)
    question_len = len(question_canvas(diffusion.builder, one.questions[0], TICKET).prompt_ids)
    print(
        f"backbones: hidden {args.hidden}, {args.layers} layers, vocab {diffusion.builder.format.vocab_size}; "
        f"DiffusionGemma with 4 experts (top 2), Gemma 3 dense causal LM; prompt at k=1: {joint_len} tokens "
        f"(joint), {question_len} (per question); {args.items} items per cell, median; "
        f"torch threads {torch.get_num_threads()}\n"
    )
    header = "| k | read | model passes / item | median ms / item | × joint diffusion |"
    print(header)
    print("|---|---|---|---|---|")
    for k in [int(x) for x in args.ks.split(",")]:
        schema = schema_with(k)

        def upstream_joint(i: int) -> None:
            read_joint(diffusion, schema, f"{TICKET} #{i}", SERVED_WIDTH)

        def per_question(i: int) -> None:
            for q in schema.questions:
                diffusion.read([question_canvas(diffusion.builder, q, f"{TICKET} #{i}")])

        runs = [
            ("diffusion joint (diffjev)", lambda i: read(schema, f"{TICKET} #{i}", diffusion), d_calls),
            ("diffusion joint (vLLM 0.33 joint: true)", upstream_joint, d_calls),
            ("diffusion per-question (vLLM /v1/systemone)", per_question, d_calls),
            ("AR single", lambda i: read(schema, f"{TICKET} #{i}", single), c_calls),
            ("AR sequential", lambda i: read(schema, f"{TICKET} #{i}", sequential), c_calls),
        ]
        passes = {}
        for label, fn, calls in runs:  # passes counted on one item, alone
            before = calls[0]
            fn(-2)
            passes[label] = calls[0] - before
        medians = measure([(label, fn) for label, fn, _ in runs], args.items)
        joint = medians[runs[0][0]]
        for label, _, _ in runs:
            print(
                f"| {k} | {label} | {passes[label]} | {medians[label] * 1000:.1f} | {medians[label] / joint:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
