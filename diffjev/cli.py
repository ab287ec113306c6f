"""`diffjev ...`: the command line. Every command has --help; a user error ends with one clear line and
exit status 2, never a traceback.

  diffjev init --project tickets --schema schema.json [--text-field text]
  diffjev import --project tickets items.csv [--text-field body] [--id-field id] [--context a,b] [--max-chars N]
  diffjev prelabel --project tickets [--engine auto|vllm|transformers|autoregressive] [--resume [RUN]]
  diffjev export --project tickets --format parquet --out labeled.parquet [--run N] [--annotator A] [--all]
                 [--no-csv-escape]
  diffjev import-project --from labelstudio export.json --config label_config.xml --project tickets
  diffjev import-project --from argilla dataset_folder --project tickets
  diffjev import-project --from hf exported_folder_or_hub_name --project tickets
  diffjev export --project tickets --format labelstudio|argilla --out PATH
  diffjev stats --project tickets
  diffjev read --schema schema.json "some text" ...          (no database: print decisions as JSON lines)
  diffjev serve-model --model google/diffusiongemma-26B-A4B-it   (vllm serve with the structured-read flags)
  diffjev serve-model --backend transformers --tiny           (vLLM's wire format on a CPU, in-process)
"""

from __future__ import annotations

import argparse
import ipaddress
import itertools
import json
import os
import shlex
import shutil
import signal
import sys
import threading
from pathlib import Path
from typing import Any, Iterator

from diffjev.engines.auto import ENGINE_CHOICES, EngineChoice, choose_engine
from diffjev.engines.base import DEFAULT_MAX_MODEL_LEN, EngineError
from diffjev.engines.vllm import MAX_COMPLETION_PROMPTS
from diffjev.errors import SchemaError
from diffjev.models import ModelLoadError
from diffjev.settings import quiet_libraries

DEFAULT_CANVAS = 64


class UserError(Exception):
    """Bad input from the command line: printed as one line."""


def _states(args_states: list[str]) -> Iterator[Any]:
    lines = args_states or (line.rstrip("\n") for line in sys.stdin)
    for line in lines:
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except ValueError:
            yield line


def _load_schema(path: str):
    from diffjev.schema import Schema

    try:
        return Schema.from_dict(json.loads(Path(path).read_text()))
    except OSError as exc:
        raise UserError(f"cannot read the schema file {path}: {exc.strerror}") from None
    except ValueError as exc:  # JSON errors and SchemaError alike
        raise UserError(f"{path}: {exc}") from None


def _engine_choice(args: argparse.Namespace) -> EngineChoice:
    return EngineChoice(
        kind=args.engine,
        url=args.url,
        model=args.model,
        tokenizer=args.tokenizer,
        canvas_length=args.canvas,
        api_key=os.environ.get("DIFFJEV_VLLM_API_KEY"),
        reads_per_request=getattr(args, "reads_per_request", 1) or 1,
    )


def _engine(args: argparse.Namespace):
    workers = getattr(args, "workers", 0) or 0
    if workers < 0:
        raise UserError("--workers must be 0 (reads in this process) or more")
    if getattr(args, "reads_per_request", 1) < 1:
        raise UserError("--reads-per-request must be 1 (one chat completion a read) or more")
    if getattr(args, "ray", None):
        if getattr(args, "reads_per_request", 1) > 1:
            from diffjev.engines.auto import check_choice

            choice = _engine_choice(args)
            if choice.kind == "jev" or check_choice(choice) is None:
                raise UserError(
                    "--reads-per-request is for the vllm engine (a vLLM server's /v1/completions); the "
                    f"{choice.kind} engine reads one item a request"
                )
        return _ray_engine(args, workers)
    # Each worker is an interpreter with the tokenizer and torch loaded (about 0.7 GB): past twice the cores
    # they only take memory, and a thousand of them take all of it.
    most = max(4, 2 * (os.cpu_count() or 1))
    if workers > most:
        raise UserError(
            f"--workers {workers} is more than this machine can use: at most {most} ({os.cpu_count()} cores)"
        )
    chosen = choose_engine(_engine_choice(args))
    print(f"# engine: {chosen.description}", file=sys.stderr)
    if getattr(args, "reads_per_request", 1) > 1 and chosen.engine.name != "vllm":
        chosen.engine.close()
        raise UserError(
            f"--reads-per-request is for the vllm engine (a vLLM server's /v1/completions); the "
            f"{chosen.engine.name} engine reads one item a request"
        )
    reads_per_request, asked = getattr(chosen.engine, "reads_per_request", 1), getattr(args, "reads_per_request", 1)
    if reads_per_request > 1:
        print(f"# {reads_per_request} reads a request (/v1/completions)", file=sys.stderr)
    if reads_per_request < asked:  # said, not silently cut
        print(
            f"# --reads-per-request {asked} is more than one request carries: {reads_per_request}, the most "
            f"reads in flight ({chosen.engine.max_in_flight}; a request has at most {MAX_COMPLETION_PROMPTS} "
            "prompts)",
            file=sys.stderr,
        )
    if workers:
        if chosen.engine.name not in ("vllm", "jev-api"):
            chosen.engine.close()
            raise UserError("--workers is for the server engines (vllm, jev); an in-process model reads in one process")
        import functools

        from diffjev.engines.processes import ProcessEngine, engine_from_choice

        chosen.engine.close()
        print(f"# reads in {workers} worker processes", file=sys.stderr)
        return ProcessEngine(functools.partial(engine_from_choice, _engine_choice(args)), processes=workers)
    return chosen.engine


def _ray_engine(args: argparse.Namespace, workers: int):
    """The chosen engine's reads distributed over a Ray cluster (`--ray`: local, or an address). The engine
    is built on the cluster's workers only: a model is never loaded on this machine for them."""
    import functools

    from diffjev.engines.auto import check_choice

    try:
        import ray
    except ImportError:
        raise UserError('--ray needs the ray extra: pip install -e ".[ray]"') from None
    from diffjev.engines.processes import engine_from_choice
    from diffjev.engines.ray_data import RayEngine, start_ray

    choice = _engine_choice(args)
    in_process = check_choice(choice) is None  # no server URL: a model read in each worker
    address = None if args.ray == "local" else args.ray
    start_ray(address)
    gpus = 1 if in_process and ray.cluster_resources().get("GPU", 0) >= 1 else 0
    engine = RayEngine(functools.partial(engine_from_choice, choice), workers=workers or None, gpus_per_worker=gpus)
    where = "a local Ray instance" if address is None else f"the Ray cluster at {address}"
    print(f"# engine: {engine.name}, model {engine.model_name}", file=sys.stderr)
    print(f"# reads on {where}: {engine.workers} workers" + (", one GPU each" if gpus else ""), file=sys.stderr)
    return engine


def _db(args: argparse.Namespace):
    from storage.db import Database

    return Database(args.db)


def cmd_read(args: argparse.Namespace) -> None:
    from diffjev.read import read_many

    schema = _load_schema(args.schema)
    engine = _engine(args)
    states, to_read = itertools.tee(_states(args.states))
    for state, decision in zip(states, read_many(schema, to_read, engine, seed=args.seed)):
        out = {"state": state, "answers": {q: a.to_dict() for q, a in decision.answers.items()}}
        print(json.dumps(out, ensure_ascii=False), flush=True)


def cmd_init(args: argparse.Namespace) -> None:
    from storage import repo

    schema = _load_schema(args.schema)
    db = _db(args)
    with db.session() as session:
        repo.create_project(session, args.project, schema, args.user, text_field=args.text_field)
        if args.members:
            repo.set_members(session, args.project, args.members.split(","), args.user)
    print(f"created project {args.project!r} with {len(schema.questions)} questions in {db.url}")


def cmd_members(args: argparse.Namespace) -> None:
    from storage import repo

    if (args.users is None) == (not args.open):
        raise UserError("give the members as user1,user2, or --open to let every user who can log in open it")
    with _db(args).session() as session:
        members = repo.set_members(session, args.project, None if args.open else args.users.split(","), args.user)
    print(f"project {args.project!r}: " + ("open to every user" if members is None else f"only {', '.join(members)}"))


def cmd_reviewers(args: argparse.Namespace) -> None:
    from storage import repo

    if (args.users is None) == (not args.none):
        raise UserError("give the reviewers as user1,user2, or --none to let every member run the project")
    with _db(args).session() as session:
        reviewers = repo.set_reviewers(session, args.project, None if args.none else args.users.split(","), args.user)
    print(
        f"project {args.project!r}: "
        + (f"reviewers {', '.join(reviewers)}; other members answer only" if reviewers else "every member runs it")
    )


def cmd_hash_password(args: argparse.Namespace) -> None:
    import getpass

    from diffjev.passwords import hash_password

    # Read, never taken as an argument: an argument shows in the process list and the shell's history.
    if sys.stdin.isatty():
        password = getpass.getpass("password: ")
        if getpass.getpass("again: ") != password:
            raise UserError("the two passwords differ; run it again")
    else:
        password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise UserError("the password is empty; type one, or pipe it on the first line of stdin")
    print(hash_password(password))


def cmd_import(args: argparse.Namespace) -> None:
    from diffjev.services.importing import import_items

    context = [c for c in args.context.split(",") if c] if args.context is not None else None
    report = import_items(
        _db(args),
        args.project,
        args.source,
        text_field=args.text_field,
        id_field=args.id_field,
        context_fields=context,
        split=args.split,
        actor=args.user,
        max_chars=args.max_chars,
        image_field=args.image_field,
        image_folder=args.image_folder or _image_folder(args.source),
    )
    print(report.summary())


def _image_folder(source: str) -> str | None:
    """Where image paths in a file's rows are read from unless --image-folder says: the file's own folder (a
    saved dataset: its folder; a Hub name: none)."""
    path = Path(source)
    return str(path.parent) if path.is_file() else str(path) if path.is_dir() else None


def cmd_prelabel(args: argparse.Namespace) -> None:
    from tqdm import tqdm

    from diffjev.services.prelabel import prelabel
    from storage import repo

    db = _db(args)
    run_id = None
    if args.resume is not None:
        with db.read() as session:
            project = repo.get_project(session, args.project)
            if args.resume == "latest":
                run = repo.latest_run(session, project.id, unfinished_only=True)
                if run is None:
                    raise UserError(f"project {args.project!r} has no unfinished run to resume")
                run_id = run.id
            elif args.resume.strip().isdigit():
                run_id = int(args.resume)
            else:
                raise UserError(
                    f"--resume takes a run's id (a number), or nothing for the latest unfinished; not {args.resume!r}"
                )
    engine = _engine(args)
    cancel = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: cancel.set())  # Ctrl-C: finish the batch, then stop cleanly
    bar = tqdm(unit="item", file=sys.stderr)

    def progress(p) -> None:
        bar.total = p.total
        bar.update(p.done - bar.n)
        bar.set_postfix(failed=p.failed)

    try:
        report = prelabel(
            db,
            args.project,
            engine,
            run_id=run_id,
            only_unlabeled=args.only_unlabeled,
            seed=args.seed,
            batch_items=args.batch,
            actor=args.user,
            progress=progress,
            cancel=cancel,
        )
    finally:
        bar.close()
        engine.close()
    print(f"run {report.run_id} {report.status}: {report.read} read, {report.failed} failed, {report.seconds:.1f} s")
    for item_id, external_id, error in report.failures[:20]:
        print(f"  failed item {external_id or item_id}: {error}")
    if report.error:
        print(f"  {report.error}")
    if report.status in ("cancelled", "failed"):
        print(f"  resume with: {resume_command(args, report.run_id)}")
    if report.status == "failed":
        raise SystemExit(1)
    if report.status == "cancelled":  # a shell's `prelabel && next` must not go on
        raise SystemExit(128 + signal.SIGINT)


def resume_command(args: argparse.Namespace, run_id: int) -> str:
    """The command that resumes the run: the same database and engine flags (a run resumes only with the
    engine and model it was made with), a server URL shown without its password."""
    from diffjev.engines.base import shown_url

    words = ["diffjev", "prelabel", "--project", args.project, "--resume", str(run_id)]
    flags = [
        ("--db", args.db),
        ("--engine", args.engine if args.engine != "auto" else None),
        ("--url", ",".join(shown_url(url) for url in args.url.split(",")) if args.url else None),
        ("--model", args.model),
        ("--tokenizer", args.tokenizer),
        ("--canvas", str(args.canvas) if args.canvas != DEFAULT_CANVAS else None),
        ("--workers", str(args.workers) if args.workers else None),
        ("--reads-per-request", str(args.reads_per_request) if args.reads_per_request != 1 else None),
    ]
    words += [part for flag, value in flags if value is not None for part in (flag, value)]
    if args.ray:
        words += ["--ray"] + ([] if args.ray == "local" else [args.ray])
    return " ".join(shlex.quote(word) for word in words)


def cmd_import_project(args: argparse.Namespace) -> None:
    from diffjev.services.interchange import import_file

    report = import_file(_db(args), args.project, args.source_format, args.source, args.user, config=args.config)
    print(report.summary())


def cmd_export(args: argparse.Namespace) -> None:
    from diffjev.services.exporting import export_project
    from diffjev.services.interchange import EXPORT_FORMATS, export_file

    if args.ls_user_ids and args.format != "labelstudio":
        raise UserError(f"--ls-user-ids is for the labelstudio format, not {args.format}")
    if args.format in EXPORT_FORMATS:
        if args.push_to_hub or args.annotator:
            raise UserError(f"--push-to-hub and --annotator are for diffjev's own formats, not {args.format}")
        count = export_file(
            _db(args),
            args.project,
            args.format,
            args.out,
            args.user,
            run_id=args.run,
            reviewed_only=not args.all,
            ls_user_ids=args.ls_user_ids,
        )
        print(f"wrote {count} items to {args.out}")
        return
    token = args.hf_token or os.environ.get("HF_TOKEN")
    count = export_project(
        _db(args),
        args.project,
        args.out,
        args.format,
        run_id=args.run,
        annotator=args.annotator,
        reviewed_only=not args.all,
        actor=args.user,
        push_to_hub=args.push_to_hub,
        token=token,
        csv_escape=False if args.no_csv_escape else None,
    )
    print(f"wrote {count} items to {args.out}" + (f" and pushed to {args.push_to_hub}" if args.push_to_hub else ""))


def cmd_stats(args: argparse.Namespace) -> None:
    from storage import repo

    with _db(args).read() as session:
        project = repo.get_project(session, args.project)
        stats = repo.project_stats(session, project.id)
        questions = {m.question_id: m.question.key for m in repo.latest_version(session, project.id).members}
        for run in stats["runs"]:
            run["counts"] = repo.run_counts(session, run["id"])
    print(f"project {args.project}: {stats['items']} items, schema version {stats['schema_version']}")
    for qid, key in questions.items():
        print(f"  {key}: {stats['answered'].get(qid, 0)} answered")
    for run in stats["runs"]:
        print(
            f"  run {run['id']}: {run['engine']} {run['model_name']} {run['status']}, "
            f"{run['counts'].get('ok', 0)} read, {run['counts'].get('failed', 0)} failed"
        )


def vllm_command(args: argparse.Namespace) -> list[str]:
    """`vllm serve` with what structured reads need: the canvas, logprobs for the top-20 plus labels,
    prefix caching (every read of a project shares its system prompt) and async scheduling (narrow
    canvases below the served width)."""
    command = [
        "vllm",
        "serve",
        args.model,
        "--port",
        str(args.port),
        "--host",
        args.host,
        "--diffusion-config",
        json.dumps({"canvas_length": args.canvas}),
        "--max-logprobs",
        "32",
        "--enable-prefix-caching",
        "--async-scheduling",
    ]
    if args.served_model_name:
        command += ["--served-model-name", args.served_model_name]
    if args.api_key:
        command += ["--api-key", args.api_key]
    return command


def _shown_command(command: list[str]) -> str:
    """The command for a person to read: the API key hidden, as every secret is in diffjev's output."""
    shown = list(command)
    for i, word in enumerate(shown[:-1]):
        if word == "--api-key":
            shown[i + 1] = "$VLLM_API_KEY"
    return shlex.join(shown)


def cmd_serve_model(args: argparse.Namespace) -> None:
    if args.backend == "vllm":
        if args.tiny or not args.model:
            raise UserError(
                "serve-model --backend vllm needs --model (a DiffusionGemma name or folder); "
                "--tiny runs with --backend transformers"
            )
        command = vllm_command(args)
        if args.dry_run:
            print(_shown_command(command))
            return
        if shutil.which("vllm") is None:
            raise UserError(
                "vllm is not installed here. On a GPU host: pip install 'diffjev[vllm]'; on a CPU, "
                "serve the model in-process with --backend transformers"
            )
        os.execvp(command[0], command)
    _serve_transformers(args)


def _serve_transformers(args: argparse.Namespace) -> None:
    import uvicorn

    from diffjev.engines.transformers import TransformersEngine
    from diffjev.models import offline_gemma_tokenizer
    from diffjev.serve import DEFAULT_MAX_STEPS, create_app

    max_model_len = args.max_model_len or DEFAULT_MAX_MODEL_LEN
    if max_model_len <= args.canvas:
        raise UserError(f"--max-model-len must be more than the canvas ({args.canvas} tokens)")
    sizes = {"canvas_length": args.canvas, "max_model_len": max_model_len}
    if args.tiny:
        from diffjev.tiny import TINY_SERVED_NAME, tiny_diffusion_gemma

        engine = TransformersEngine(tiny_diffusion_gemma(), offline_gemma_tokenizer(), **sizes)
        name = args.served_model_name or TINY_SERVED_NAME
    elif args.model:
        engine = TransformersEngine(args.model, args.tokenizer, **sizes)
        name = args.served_model_name or args.model
    else:
        raise UserError("give --model PATH_OR_NAME, or --tiny for a random-weight test model")
    app = create_app(
        engine,
        name,
        canvas_length=args.canvas,
        service_latency_s=args.service_latency_ms / 1000,
        memoize=args.memoize,
        api_key=args.api_key,
        max_steps=args.max_steps or DEFAULT_MAX_STEPS,
        max_model_len=max_model_len,
    )
    guard = "every request needs the API key" if args.api_key else "no API key: it answers anyone who reaches it"
    print(f"# serving {name} on http://{args.host}:{args.port} (vLLM wire format; {guard})", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


def open_without_key_warning(host: str, api_key: str | None) -> str | None:
    """The warning for a backend that answers anyone on a host other machines reach, else None."""
    if api_key:
        return None
    try:
        loopback = ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: only localhost is known to stay on this machine
        loopback = host.lower() == "localhost"
    if loopback:
        return None
    return (
        f"# warning: listening on {host} without an API key, so anyone who reaches this port gets predictions; "
        f"give --api-key (or $DIFFJEV_LS_BACKEND_API_KEY) or --host 127.0.0.1"
    )


def cmd_serve_ls_backend(args: argparse.Namespace) -> None:
    import uvicorn

    from diffjev.services.ls_backend import MB, create_ls_backend, model_version_of

    warning = open_without_key_warning(args.host, args.api_key)
    if warning:  # said before the model loads, so it is the first thing the operator sees
        print(warning, file=sys.stderr, flush=True)
    engine = _engine(args)
    app = create_ls_backend(
        engine,
        api_key=args.api_key,
        max_tasks=args.max_tasks,
        max_body_bytes=args.max_body_mb * MB if args.max_body_mb else None,
        seed=args.seed,
    )
    guard = "basic auth with the API key as password" if args.api_key else "no API key: it answers anyone"
    print(
        f"# Label Studio ML backend {model_version_of(engine)} on http://{args.host}:{args.port} ({guard})",
        file=sys.stderr,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


def _positive_int(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def _seed(text: str) -> int:
    """A noise seed: stored with the run as a 64-bit integer."""
    if not text.strip().isdigit() or int(text) >= 2**63:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 0 to {2**63 - 1}")
    return int(text)


def _canvas_width(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 16 or int(text) % 16:
        raise argparse.ArgumentTypeError(f"{text!r} is not a canvas width: a multiple of 16 tokens (16, 32, 64 ...)")
    if int(text) >= DEFAULT_MAX_MODEL_LEN:  # a canvas that fills the context leaves no room for the item
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a canvas width: it must leave room for the prompt within the {DEFAULT_MAX_MODEL_LEN} "
            "tokens a read may take"
        )
    return int(text)


def _engine_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--engine",
        default="auto",
        choices=ENGINE_CHOICES,
        help="auto: a vLLM server if DIFFJEV_VLLM_URL is set, else DIFFJEV_MODEL in-process, "
        "else the offline autoregressive fallback",
    )
    p.add_argument(
        "--url",
        help="server URL for the vllm and jev engines (default: $DIFFJEV_VLLM_URL); the vllm engine takes several, "
        "comma-separated or a file of them (one a line): each read goes to the one with the fewest in flight",
    )
    p.add_argument(
        "--model",
        help="served model name (vllm, jev; default $DIFFJEV_VLLM_MODEL) or a folder / "
        "Hub name (transformers, autoregressive; default $DIFFJEV_MODEL)",
    )
    p.add_argument("--tokenizer", help="tokenizer folder or Hub name, when it differs from the model")
    p.add_argument("--canvas", type=_canvas_width, default=DEFAULT_CANVAS, help="the served canvas width (default 64)")
    p.add_argument("--seed", type=_seed, default=42, help="noise seed (default 42)")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="diffjev",
        description="Structured reads for model-assisted labeling.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    sub = top.add_subparsers(dest="command", required=True)

    def command(name: str, func, help: str, db: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help)
        if db:
            p.add_argument("--db", help="database file or SQLAlchemy URL (default: $DIFFJEV_DB, else ./diffjev.db)")
            p.add_argument("--user", default=os.environ.get("USER", "cli"), help="who is acting, for the audit log")
        p.set_defaults(func=func)
        return p

    p = command("init", cmd_init, "create a project from a schema JSON file")
    p.add_argument("--project", required=True)
    p.add_argument("--schema", required=True, help="a schema JSON file")
    p.add_argument("--text-field", default="text", help="the column that holds the text (default: text)")
    p.add_argument("--members", help="only these users (user1,user2) may open the project in the studio")

    p = command("members", cmd_members, "restrict a project to named users, or open it to every user")
    p.add_argument("--project", required=True)
    p.add_argument("users", nargs="?", help="user1,user2: the only users who may open the project in the studio")
    p.add_argument("--open", action="store_true", help="let every user who can log in open the project")

    p = command(
        "reviewers",
        cmd_reviewers,
        "name a project's reviewers (they adjudicate, import, pre-label, export and change the schema; the other "
        "members answer only), or --none to let every member do so",
    )
    p.add_argument("--project", required=True)
    p.add_argument("users", nargs="?", help="user1,user2: the project's reviewers")
    p.add_argument("--none", action="store_true", help="name no reviewers: every member runs the project")

    command(
        "hash-password",
        cmd_hash_password,
        "print a password's scrypt hash, for DIFFJEV_USERS=user:HASH "
        "(reads the password from the terminal or the first line of stdin)",
        db=False,
    )

    p = command("import", cmd_import, "import items from CSV, JSONL, Parquet or a Hugging Face dataset")
    p.add_argument("--project", required=True)
    p.add_argument("source", help="a .csv/.jsonl/.parquet file, a save_to_disk folder, or a Hub dataset name")
    p.add_argument("--text-field", help="the column that holds the text (default: the project's)")
    p.add_argument("--id-field", help="a column that identifies items; re-imports key on it (else on content)")
    p.add_argument("--context", help="comma-separated columns to keep as context (default: all others)")
    p.add_argument("--split", default="train", help="dataset split (default: train)")
    p.add_argument(
        "--max-chars",
        type=_positive_int,
        metavar="N",
        help="reject items whose text is longer (default: $DIFFJEV_MAX_ITEM_CHARS, else 100000)",
    )
    p.add_argument(
        "--image-field",
        metavar="COLUMN",
        help="a column holding each item's image: a path inside the image folder, bytes, a dataset's Image "
        "feature, or a Hub dataset file URL (largest: $DIFFJEV_MAX_IMAGE, else 20mb)",
    )
    p.add_argument(
        "--image-folder",
        metavar="DIR",
        help="the folder image paths are read from; none outside it (default: the source file's folder)",
    )

    p = command("prelabel", cmd_prelabel, "pre-label a project's items through an engine")
    p.add_argument("--project", required=True)
    _engine_flags(p)
    p.add_argument("--resume", nargs="?", const="latest", help="continue a run: its id, or the latest unfinished")
    p.add_argument("--only-unlabeled", action="store_true", help="skip items that already have a human answer")
    p.add_argument("--batch", type=_positive_int, default=64, help="items per stored batch (default 64)")
    p.add_argument(
        "--workers",
        type=int,
        default=0,
        help="server engines: build, send and decode reads in N worker processes, past one interpreter's "
        "limit (default 0: in this process); with --ray, the Ray tasks reading at once",
    )
    p.add_argument(
        "--reads-per-request",
        type=int,
        default=1,
        metavar="N",
        help="vllm engine: send text reads N to a request, as one /v1/completions request with the prompts as "
        "token ids (default 1: one chat completion a read); fewer requests cost the client and the server less "
        "CPU for the same reads in flight",
    )
    p.add_argument(
        "--ray",
        nargs="?",
        const="local",
        metavar="ADDRESS",
        help="read on a Ray cluster through Ray Data: its address (host:port, ray://host:10001, or auto), or "
        "none for a local Ray instance; one engine per Ray worker, one GPU each for an in-process model on "
        "a cluster with GPUs (needs the ray extra)",
    )

    p = command("export", cmd_export, "export the labeled set")
    p.add_argument("--project", required=True)
    p.add_argument("--format", required=True, choices=("jsonl", "csv", "parquet", "hf", "labelstudio", "argilla"))
    p.add_argument(
        "--out",
        required=True,
        help="the file (or folder, for hf and argilla) to write; labelstudio writes the tasks JSON and its "
        "labeling config beside it (<name>.label_config.xml)",
    )
    p.add_argument(
        "--run",
        type=int,
        help="whose suggestions to include (default: the latest run; labelstudio and argilla: every run)",
    )
    p.add_argument("--annotator", help="only this annotator's answers")
    p.add_argument(
        "--ls-user-ids",
        action="store_true",
        help="labelstudio: credit each annotation to its annotator's Label Studio user id (completed_by), for "
        "an instance where those users exist; by default Label Studio credits the user who imports, and the "
        "annotators' names travel in each task's meta",
    )
    p.add_argument("--all", action="store_true", help="every item, not only those with a human answer")
    p.add_argument("--push-to-hub", metavar="REPO", help="also push the hf export to this Hub dataset repo")
    p.add_argument("--hf-token", help="Hub token for --push-to-hub (default: $HF_TOKEN)")
    p.add_argument(
        "--no-csv-escape",
        action="store_true",
        help="csv: write cells starting with = + - @ tab or CR as they are, without the leading ' that "
        "keeps spreadsheets from running them as formulas (default: escaped, unless "
        "DIFFJEV_CSV_ESCAPE=0)",
    )

    p = command(
        "import-project",
        cmd_import_project,
        "import a Label Studio export, an Argilla dataset or a diffjev Hub export: its questions, items, people's "
        "answers and model suggestions, in one transaction (a new project, or one asking the same questions)",
    )
    p.add_argument("--project", required=True, help="the project to make (or add to)")
    p.add_argument("--from", dest="source_format", required=True, choices=("labelstudio", "argilla", "hf"))
    p.add_argument(
        "source",
        help="labelstudio: the JSON export file; argilla: the folder Dataset.to_disk wrote; hf: a dataset "
        "`diffjev export --format hf` wrote (its folder, or its Hub name)",
    )
    p.add_argument(
        "--config",
        help="labelstudio: the project's labeling config (XML; default: <export name>.label_config.xml beside it)",
    )

    p = command("stats", cmd_stats, "counts of items, answers and runs")
    p.add_argument("--project", required=True)

    p = command("read", cmd_read, "read states with a schema and print one JSON decision per line", db=False)
    p.add_argument("--schema", required=True, help="a schema JSON file")
    _engine_flags(p)
    p.add_argument("states", nargs="*", help="texts or JSON; default: one per line of stdin")

    p = command("serve-model", cmd_serve_model, "serve a diffusion model for structured reads", db=False)
    p.add_argument(
        "--backend",
        choices=("vllm", "transformers"),
        default="vllm",
        help="vllm: exec `vllm serve` with the structured-read flags (needs vllm and a GPU); "
        "transformers: serve vLLM's wire format from an in-process model (CPU is fine)",
    )
    p.add_argument("--model", help="a DiffusionGemma (or, for transformers, masked-LM) folder or Hub name")
    p.add_argument("--tokenizer")
    p.add_argument("--tiny", action="store_true", help="a tiny random-weight DiffusionGemma (transformers backend)")
    p.add_argument("--served-model-name")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--canvas", type=_canvas_width, default=DEFAULT_CANVAS)
    p.add_argument(
        "--service-latency-ms",
        type=float,
        default=0.0,
        help="transformers backend: a fixed wait per request, standing in for a GPU in benchmarks",
    )
    p.add_argument(
        "--memoize",
        action="store_true",
        help="transformers backend: answer a seeded read asked before from memory (benchmarks)",
    )
    p.add_argument(
        "--max-steps",
        type=_positive_int,
        help="transformers backend: the most denoise steps one read may ask for (default 8); reads share one "
        "model, so a longer read holds every other",
    )
    p.add_argument(
        "--max-model-len",
        type=_positive_int,
        help="transformers backend: the longest prompt and canvas a request may have, in tokens (default 8192, "
        "or the model's own if shorter); attention's memory grows with its square",
    )
    p.add_argument(
        "--api-key",
        default=os.environ.get("VLLM_API_KEY") or None,
        help="answer only requests with 'Authorization: Bearer KEY', on every route, as vLLM's "
        "--api-key (default: $VLLM_API_KEY); the client sends $DIFFJEV_VLLM_API_KEY",
    )
    p.add_argument("--dry-run", action="store_true", help="vllm backend: print the command instead of running it")

    p = command(
        "serve-ls-backend",
        cmd_serve_ls_backend,
        "serve Label Studio's ML backend interface (/health, /setup, /predict, /webhook): diffjev reads as pre-labels",
        db=False,
    )
    _engine_flags(p)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=9090, help="default 9090, Label Studio's usual ML backend port")
    p.add_argument(
        "--api-key",
        default=os.environ.get("DIFFJEV_LS_BACKEND_API_KEY") or None,
        help="answer only requests with this key: Label Studio's Basic Authentication with the key as "
        "password (any user name), or 'Authorization: Bearer KEY' (default: $DIFFJEV_LS_BACKEND_API_KEY)",
    )
    p.add_argument(
        "--max-tasks",
        type=_positive_int,
        default=100,
        metavar="N",
        help="refuse a /predict with more tasks than this (default 100)",
    )
    p.add_argument(
        "--max-body-mb",
        type=_positive_int,
        metavar="MB",
        help="refuse a request body larger than this many MiB, before reading it in full (default: room for "
        "--max-tasks tasks whose texts are at the item cap, $DIFFJEV_MAX_ITEM_CHARS)",
    )
    return top


def main(argv: list[str] | None = None) -> None:
    from diffjev.io import ExportError, SourceError
    from storage.repo import Conflict, NotFound, StaleWrite

    args = parser().parse_args(argv)
    quiet_libraries()
    if getattr(args, "tiny", False) and args.backend == "vllm" and not args.model:
        args.backend = "transformers"  # --tiny alone means the in-process server
    try:
        args.func(args)
    except (
        UserError,
        SchemaError,
        EngineError,
        ModelLoadError,
        SourceError,
        ExportError,
        NotFound,
        Conflict,
        StaleWrite,
    ) as exc:
        print(f"diffjev {args.command}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
