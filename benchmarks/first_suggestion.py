"""A newcomer's first start: from `python app.py` to the page, to the first suggestion on it, to the whole
demo read.

Each trial runs `python app.py` as its own process on a fresh temporary database (so the demo project is
created and pre-labeled, as on a first start) and a free port, and measures from the moment it starts:

- page s: the first HTTP 200 from /.
- model ready s: when the page's header stops saying the model is loading (the page itself, where the
  header never says so).
- first suggestion s: a real browser (Playwright, Debian's chromium) on the Annotate tab shows a
  distribution. It presses Start once and waits; where the page does not pick suggestions up by itself,
  it presses Start again every few seconds, as a person would.
- first pass s: every demo item has a stored suggestion (the database's suggestions table).
- all reads s: no run of the demo is reading any more (the first pass and any later draws stored).

Engines: `offline` is what `python app.py` picks with no settings on a machine without the Hub (the
offline Gemma 3 270M fallback); `diffusion` sets DIFFJEV_MODEL to a tiny random DiffusionGemma folder
saved with diffjev/tiny.py (the in-process diffusion path; its answers are noise, its costs are real).
Cache: `cold` is a fresh empty DIFFJEV_CACHE (the offline model is converted from the GGUF), `warm`
reuses the cache a cold trial filled.

Run: python benchmarks/first_suggestion.py [--engines offline,diffusion] [--repeat-cold 1] [--repeat-warm 3]
     [--cap 600] [--no-accuracy]
Each wait is capped at --cap seconds from the start; a figure past it prints as "> cap s".
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
DEMO_ITEMS = 60
GOALS = {
    "page": "page < 10 s",
    "first": "first suggestion < 10 s after the model is ready",
    "warm": "warm cache: first suggestion < 20 s from start",
}
BROWSER_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
START_AGAIN_S = 5.0  # how often the browser presses Start again while the queue shows no distribution


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_diffusion_folder(where: Path) -> Path:
    """A tiny random DiffusionGemma with the real Gemma tokenizer, saved as a model folder."""
    from diffjev.models import offline_gemma_tokenizer
    from diffjev.tiny import tiny_diffusion_gemma

    folder = where / "tiny-dgemma"
    tiny_diffusion_gemma().save_pretrained(folder)
    offline_gemma_tokenizer().save_pretrained(folder)
    return folder


class Trial:
    """One `python app.py` on a fresh database, with the clock started just before it."""

    def __init__(self, workdir: Path, cache: Path, model: Path | None):
        self.db = workdir / "studio.db"
        self.port = free_port()
        env = {**os.environ, "DIFFJEV_DB": str(self.db), "DIFFJEV_CACHE": str(cache)}
        env.update(GRADIO_SERVER_PORT=str(self.port), PORT=str(self.port))
        env.pop("DIFFJEV_PROJECT", None)
        env.pop("DIFFJEV_VLLM_URL", None)
        env.pop("DIFFJEV_MODEL", None)
        if model is not None:
            env["DIFFJEV_MODEL"] = str(model)
        self.log = open(workdir / "app.log", "w")  # noqa: SIM115 - closed in stop()
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "app.py")], cwd=workdir, env=env, stdout=self.log, stderr=subprocess.STDOUT
        )
        self.url = f"http://127.0.0.1:{self.port}/"

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.log.close()

    def alive(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"app.py exited with {self.process.returncode}; see {self.log.name}")

    def page_served(self, cap: float) -> float | None:
        while self.elapsed() < cap:
            self.alive()
            try:
                if httpx.get(self.url, timeout=2).status_code == 200:
                    return self.elapsed()
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        return None

    def reads(self) -> tuple[int, bool]:
        """(items with a suggestion, whether a run is still reading), from the database itself."""
        try:
            with sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=5) as con:
                suggested = con.execute("SELECT COUNT(DISTINCT item_id) FROM suggestions").fetchone()[0]
                running = con.execute("SELECT COUNT(*) FROM runs WHERE status = 'running'").fetchone()[0]
                return suggested, running > 0
        except sqlite3.Error:  # the tables are not made yet
            return 0, True


def watch_page(trial: Trial, page, cap: float) -> tuple[float | None, float | None]:
    """(model ready s, first suggestion s) as the Annotate tab shows them."""
    page.goto(trial.url, wait_until="domcontentloaded")
    page.wait_for_selector("#annotate-start", timeout=cap * 1000)
    ready = None
    pressed = 0.0
    while trial.elapsed() < cap:
        trial.alive()
        banner = (page.text_content("#engine-banner") or "").lower()
        if ready is None and "loading" not in banner:
            ready = trial.elapsed()
        if time.perf_counter() - pressed >= START_AGAIN_S and ready is not None:
            page.click("#annotate-start")
            pressed = time.perf_counter()
        # gr.Label draws one "<answer>-confidence-set" row per answer once it holds a distribution
        if page.locator("#distribution [data-testid$='-confidence-set']").count():
            return ready, trial.elapsed()
        time.sleep(0.25)
    return ready, None


def run_trial(workdir: Path, cache: Path, model: Path | None, cap: float, browser) -> dict[str, float | None]:
    trial = Trial(workdir, cache, model)
    figures: dict[str, float | None] = {}
    try:
        figures["page"] = trial.page_served(cap)
        page = browser.new_page()
        try:
            figures["ready"], figures["first"] = (
                watch_page(trial, page, cap) if figures["page"] is not None else (None, None)
            )
        finally:
            page.close()
        figures["first_pass"] = figures["all"] = None
        while trial.elapsed() < cap:
            trial.alive()
            suggested, running = trial.reads()
            if figures["first_pass"] is None and suggested >= DEMO_ITEMS:
                figures["first_pass"] = trial.elapsed()
            if figures["first_pass"] is not None and not running:
                time.sleep(1.0)  # a later pass starts right after the first: look twice
                if not trial.reads()[1]:
                    figures["all"] = trial.elapsed()
                    break
            time.sleep(0.5)
    finally:
        trial.stop()
    return figures


def offline_accuracy_rows() -> list[str]:
    """The offline model's accuracy per demo question against the demo's expected answers, with the label
    mass and chance (benchmarks/offline_accuracy.py), as table lines."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import offline_accuracy

    rows = []
    for engine in offline_accuracy.offline_engines(["single", "options"]):
        rows.extend(offline_accuracy.demo_accuracy(engine))
    return offline_accuracy.table(rows).splitlines()


def shown(values: list[float | None], cap: float) -> str:
    if not values or any(v is None for v in values):
        return f"> {cap:.0f}"
    return f"{statistics.median(values):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--engines", default="offline,diffusion")
    parser.add_argument("--repeat-cold", type=int, default=1)
    parser.add_argument("--repeat-warm", type=int, default=3)
    parser.add_argument("--cap", type=float, default=600.0, help="seconds from start before a wait gives up")
    parser.add_argument(
        "--accuracy",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also print the offline model's demo accuracy (benchmarks/offline_accuracy.py)",
    )
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    rows = []
    with tempfile.TemporaryDirectory(prefix="diffjev-first-") as tmp, sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=shutil.which("chromium") or "/usr/bin/chromium", headless=True, args=BROWSER_ARGS
        )
        for engine in args.engines.split(","):
            model = tiny_diffusion_folder(Path(tmp)) if engine == "diffusion" else None
            warm_cache = Path(tmp) / f"cache-{engine}-warm"
            for cache_kind, repeat in (("cold", args.repeat_cold), ("warm", args.repeat_warm)):
                trials = []
                for i in range(repeat):
                    cache = warm_cache if cache_kind == "warm" else Path(tmp) / f"cache-{engine}-cold-{i}"
                    cache.mkdir(parents=True, exist_ok=True)
                    workdir = Path(tempfile.mkdtemp(dir=tmp, prefix=f"{engine}-{cache_kind}-"))
                    figures = run_trial(workdir, cache, model, args.cap, browser)
                    if cache_kind == "cold" and not warm_cache.exists():  # the warm trials reuse a filled cache
                        shutil.copytree(cache, warm_cache)
                    print(f"  {engine} {cache_kind} #{i + 1}: {figures}", flush=True)
                    trials.append(figures)
                if trials:
                    rows.append((engine, cache_kind, trials))
        browser.close()
    cap = args.cap
    print()
    print("| engine | cache | page s | model ready s | first suggestion s | first pass s | all reads s |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for engine, cache_kind, trials in rows:
        cells = [shown([t[k] for t in trials], cap) for k in ("page", "ready", "first", "first_pass", "all")]
        print(f"| {engine} | {cache_kind} (n={len(trials)}) | " + " | ".join(cells) + " |")
    print()
    print("Goals: " + "; ".join(GOALS.values()))
    if args.accuracy:
        print()
        print("The offline model on the demo, one read per ticket, against each ticket's expected answers:")
        for line in offline_accuracy_rows():
            print(line)


if __name__ == "__main__":
    main()
