"""`diffjev prelabel --ray ADDRESS` against a real Ray cluster (`ray start --head` on this machine), in its
own module: `ray stop` ends every Ray process here, the local instance of test_ray's included."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

from conftest import free_port
from test_runs import project_db


def without_ray_auth(home: Path) -> dict[str, str]:
    """An environment that says nothing of Ray's token authentication. Ray turns it on by itself where a token
    lies in ~/.ray/auth_token (an earlier local instance leaves one), so HOME moves to an empty folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    home.mkdir(exist_ok=True)
    return {**env, "HOME": str(home)}


def test_the_cli_reads_on_a_ray_cluster(tmp_path, tiny_model_folder):
    port = free_port()
    ray_bin = str(Path(sys.executable).with_name("ray"))
    head = [ray_bin, "start", "--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false"]
    head += ["--object-store-memory", str(200 * 2**20)]
    # The head uses Ray's token authentication with a token of this test's, whatever this machine's ~/.ray
    # holds; a client must say so (RAY_AUTH_MODE=token) and hold the same token.
    token = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    plain = without_ray_auth(tmp_path / "home")
    subprocess.run(head, check=True, capture_output=True, timeout=120, env={**plain, **token})
    try:
        project_db(tmp_path / "cli.db", 10)
        command = [sys.executable, "-m", "diffjev.cli", "prelabel", "--db", str(tmp_path / "cli.db"), "--project", "p"]
        command += ["--engine", "transformers", "--model", str(tiny_model_folder), "--ray", f"127.0.0.1:{port}"]
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, env={**plain, **token})
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"reads on the Ray cluster at 127.0.0.1:{port}" in done.stderr
        assert "completed: 10 read, 0 failed" in done.stdout
        nobody = subprocess.run(
            [*command[:-1], f"127.0.0.1:{free_port()}"], capture_output=True, text=True, timeout=300
        )
        assert nobody.returncode == 2 and "cannot reach the Ray cluster" in nobody.stderr, nobody.stderr[-2000:]
        assert "ray start --head" in nobody.stderr and "Traceback" not in nobody.stderr
        unauthenticated = subprocess.run(command, capture_output=True, text=True, timeout=300, env=plain)
        assert unauthenticated.returncode == 2 and "RAY_AUTH_MODE=token" in unauthenticated.stderr
        assert "Traceback" not in unauthenticated.stderr
        # token mode asked for, but no token anywhere: Ray's AuthenticationError, told in one line
        tokenless = subprocess.run(
            command, capture_output=True, text=True, timeout=300, env={**plain, "RAY_AUTH_MODE": "token"}
        )
        assert tokenless.returncode == 2 and "cannot reach the Ray cluster" in tokenless.stderr, tokenless.stderr
        assert "RAY_AUTH_TOKEN" in tokenless.stderr and "Traceback" not in tokenless.stderr
    finally:
        subprocess.run([ray_bin, "stop", "--force"], capture_output=True, timeout=120, env=plain)
