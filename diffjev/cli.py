"""`diffjev ...`: the command line.

- `diffjev read --schema schema.json [--engine auto|vllm|jev|transformers|autoregressive] [STATE ...]`
  reads each STATE (or each line of stdin; a line that is JSON is read as JSON) and prints one JSON
  decision per line.
- `diffjev serve-model [--model PATH | --tiny] [--port 8000]` serves a transformers diffusion model
  behind vLLM's wire format (chat completions with structured reads, and `/v1/systemone`).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any, Iterator

from diffjev.engines.auto import ENGINE_CHOICES, EngineChoice, choose_engine
from diffjev.engines.base import EngineError
from diffjev.schema import Schema, SchemaError


def _states(args_states: list[str]) -> Iterator[Any]:
    lines = args_states or (line.rstrip("\n") for line in sys.stdin)
    for line in lines:
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except ValueError:
            yield line


def _load_schema(path: str) -> Schema:
    try:
        return Schema.from_dict(json.loads(Path(path).read_text()))
    except OSError as exc:
        raise SystemExit(f"diffjev: cannot read the schema file {path}: {exc.strerror}") from None
    except ValueError as exc:  # JSON errors and SchemaError alike
        raise SystemExit(f"diffjev: {path}: {exc}") from None


def cmd_read(args: argparse.Namespace) -> None:
    from diffjev.read import read_many

    schema = _load_schema(args.schema)
    choice = EngineChoice(kind=args.engine, url=args.url, model=args.model, tokenizer=args.tokenizer,
                          canvas_length=args.canvas)
    try:
        chosen = choose_engine(choice)
        print(f"# engine: {chosen.description}", file=sys.stderr)
        states, to_read = itertools.tee(_states(args.states))
        for state, decision in zip(states, read_many(schema, to_read, chosen.engine, seed=args.seed)):
            out = {"state": state, "answers": {q: a.to_dict() for q, a in decision.answers.items()}}
            print(json.dumps(out, ensure_ascii=False), flush=True)
    except (EngineError, SchemaError) as exc:
        raise SystemExit(f"diffjev: {exc}") from None


def cmd_serve_model(args: argparse.Namespace) -> None:
    import uvicorn

    from diffjev.engines.transformers import TransformersEngine
    from diffjev.models import offline_gemma_tokenizer
    from diffjev.serve import create_app

    if args.tiny:
        from diffjev.tiny import tiny_diffusion_gemma

        engine = TransformersEngine(tiny_diffusion_gemma(), offline_gemma_tokenizer(), canvas_length=args.canvas)
        name = args.served_model_name or "diffjev/tiny-diffusiongemma-random"
    elif args.model:
        engine = TransformersEngine(args.model, args.tokenizer, canvas_length=args.canvas)
        name = args.served_model_name or args.model
    else:
        raise SystemExit("diffjev serve-model: give --model PATH_OR_NAME, or --tiny for a random-weight test model")
    app = create_app(engine, name, canvas_length=args.canvas, service_latency_s=args.service_latency_ms / 1000)
    print(f"# serving {name} on http://{args.host}:{args.port} (vLLM wire format)", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="diffjev", description="Structured reads for model-assisted labeling.")
    sub = parser.add_subparsers(dest="command", required=True)

    r = sub.add_parser("read", help="read states with a schema and print one JSON decision per line")
    r.add_argument("--schema", required=True, help="a schema JSON file")
    r.add_argument("--engine", default="auto", choices=ENGINE_CHOICES)
    r.add_argument("--url", help="server URL for the vllm and jev engines (default: $DIFFJEV_VLLM_URL)")
    r.add_argument("--model", help="model name (vllm, jev) or folder / Hub name (transformers, autoregressive)")
    r.add_argument("--tokenizer", help="tokenizer folder or Hub name, when it differs from the model")
    r.add_argument("--canvas", type=int, default=64, help="the served canvas width (default 64)")
    r.add_argument("--seed", type=int, default=42)
    r.add_argument("states", nargs="*", help="texts or JSON; default: one per line of stdin")
    r.set_defaults(func=cmd_read)

    s = sub.add_parser("serve-model", help="serve a transformers diffusion model behind vLLM's wire format")
    s.add_argument("--model", help="a DiffusionGemma or masked-LM folder or Hub name")
    s.add_argument("--tokenizer")
    s.add_argument("--tiny", action="store_true", help="a tiny random-weight DiffusionGemma (for tests and demos)")
    s.add_argument("--served-model-name")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--canvas", type=int, default=64)
    s.add_argument("--service-latency-ms", type=float, default=0.0,
                   help="a fixed wait added to every request, to stand in for a GPU server in benchmarks")
    s.set_defaults(func=cmd_serve_model)

    args = parser.parse_args(argv)
    args.func(args)


if __name__ == "__main__":
    main()
