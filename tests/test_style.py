"""One formatter and one linter for the whole tree: ruff, configured in pyproject.toml."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parent.parent
TREE = ["diffjev", "tests", "benchmarks", "app.py"]


def ruff(*args: str) -> subprocess.CompletedProcess:
    found = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))
    return subprocess.run([found, *args, *TREE], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_tree_is_formatted_by_ruff():
    done = ruff("format", "--check")
    assert done.returncode == 0, "run `ruff format`:\n" + done.stdout + done.stderr


def test_the_tree_passes_ruff_check():
    done = ruff("check")
    assert done.returncode == 0, "fix what `ruff check` says:\n" + done.stdout + done.stderr
