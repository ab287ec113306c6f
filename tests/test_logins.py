"""Logins through real HTTP: a burst of wrong passwords is refused for a while (per user and per
address, on the login page and the API's Basic auth alike), the right password works again after the
delay, and a password kept as a scrypt hash (`diffjev hash-password`) logs in."""

import logging
import subprocess
import sys
import time

import httpx
import pytest

from diffjev.passwords import hash_password
from diffjev.ui.studio import users_from_env
from studio_fixtures import serve_studio, studio_db

ALLOWED, BACKOFF = 3, 4.0  # as DIFFJEV_LOGIN_FAILURES=3, DIFFJEV_LOGIN_BACKOFF=4
BODY = {"state": "Everything is down.", "questions": {"urgent": {"type": "noul", "instructions": "Urgent?"}}}


@pytest.fixture
def studio(tmp_path, dgemma_engine, monkeypatch):
    monkeypatch.setenv("DIFFJEV_LOGIN_FAILURES", str(ALLOWED))
    monkeypatch.setenv("DIFFJEV_LOGIN_BACKOFF", str(BACKOFF))
    db = studio_db(tmp_path / "logins.db", ["Site down", "Refund please"])
    users = [("alice", "a-secret"), ("bob", hash_password("b-secret", n=2**10))]
    server, _ = serve_studio(db, dgemma_engine, auth=users)
    with server:
        yield server


def login(server, user, password):
    return httpx.post(f"{server.url}/login", data={"username": user, "password": password}, timeout=30)


def api(server, user, password):
    return httpx.post(f"{server.url}/v1/systemone", json=BODY, auth=(user, password), timeout=60)


def wait_out(response):
    time.sleep(float(response.headers["Retry-After"]) + 0.1)


def test_a_burst_of_wrong_passwords_at_the_login_is_refused_then_the_right_one_works(studio, caplog):
    caplog.set_level(logging.WARNING, logger="diffjev")
    answers = [login(studio, "alice", f"guess-{k}") for k in range(ALLOWED + 2)]
    assert [r.status_code for r in answers[:ALLOWED]] == [400] * ALLOWED  # Gradio's "Incorrect credentials"
    assert {r.status_code for r in answers[ALLOWED:]} == {429}
    assert "too many failed logins for user 'alice'" in answers[-1].json()["detail"]
    refused = login(studio, "alice", "a-secret")  # even the right password waits out the delay
    assert refused.status_code == 429
    wait_out(refused)
    assert login(studio, "alice", "a-secret").json() == {"success": True}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'alice'" in w and "127.0.0.1" in w and "refused for" in w for w in warnings)
    assert not any("guess-" in w or "a-secret" in w for w in warnings)  # never the password


def test_wrong_passwords_for_many_users_from_one_address_lock_that_address(studio):
    for k in range(ALLOWED):
        assert login(studio, f"nobody{k}", "x").status_code == 400
    refused = login(studio, "alice", "a-secret")
    assert refused.status_code == 429 and "address 127.0.0.1" in refused.json()["detail"]
    wait_out(refused)
    assert login(studio, "alice", "a-secret").json() == {"success": True}


def test_the_api_basic_auth_backs_off_too(studio):
    answers = [api(studio, "alice", f"guess-{k}").status_code for k in range(ALLOWED + 2)]
    assert answers[:ALLOWED] == [401] * ALLOWED and set(answers[ALLOWED:]) == {429}
    refused = api(studio, "alice", "a-secret")
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    wait_out(refused)
    assert api(studio, "alice", "a-secret").json()["object"] == "structured_decision"


def test_a_hashed_password_logs_in_at_the_page_and_the_api(studio):
    assert login(studio, "bob", "b-secret").json() == {"success": True}
    assert login(studio, "bob", "scrypt").status_code == 400
    assert api(studio, "bob", "b-secret").json()["object"] == "structured_decision"
    assert api(studio, "bob", "b-secret-no").status_code == 401  # the remembered check is not a bypass


def test_hash_password_prints_a_hash_that_diffjev_users_accepts(monkeypatch):
    done = subprocess.run(
        [sys.executable, "-m", "diffjev.cli", "hash-password"],
        input="correct horse\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    hashed = done.stdout.strip()
    assert hashed.startswith("scrypt:32768:8:1$") and "correct horse" not in hashed
    monkeypatch.setenv("DIFFJEV_USERS", f"carol:{hashed},dave:plain")
    users = users_from_env()
    assert users == [("carol", hashed), ("dave", "plain")]
    from diffjev.passwords import PasswordBook

    book = PasswordBook(users)
    assert book.matches("carol", "correct horse") and not book.matches("carol", "correct horsE")


def test_a_malformed_hash_in_diffjev_users_is_named_with_the_fix(monkeypatch):
    monkeypatch.setenv("DIFFJEV_USERS", "carol:scrypt:32768:8$nosalt")
    with pytest.raises(
        ValueError,
        match=r"DIFFJEV_USERS: the password of 'carol' is not a scrypt hash.*"
        r"diffjev hash-password",
    ):
        users_from_env()


def from_address(address: str) -> httpx.Client:
    """A client whose requests come from another loopback address (127.0.0.0/8 is all this machine's)."""
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=30)


def test_failures_from_other_addresses_do_not_lock_a_user_out_of_their_own(studio):
    attackers = [from_address(f"127.0.0.{k}") for k in range(2, 2 + ALLOWED + 1)]
    for attacker in attackers:  # one wrong guess from each of several addresses: alice's count passes the limit
        attacker.post(f"{studio.url}/login", data={"username": "alice", "password": "guess"})
    refused = attackers[0].post(f"{studio.url}/login", data={"username": "alice", "password": "a-secret"})
    assert refused.status_code == 429 and "user 'alice'" in refused.json()["detail"]  # bound where it failed
    own = from_address("127.0.0.1").post(f"{studio.url}/login", data={"username": "alice", "password": "a-secret"})
    assert own.json() == {"success": True}  # her own address, with no failures of its own, is not locked out
    assert api(studio, "alice", "a-secret").json()["object"] == "structured_decision"


def test_an_unknown_user_name_costs_the_same_scrypt_as_a_known_one(monkeypatch):
    """The time of a refusal says nothing of which names exist: an unknown name is checked against a
    stand-in hash of the same cost as the stored ones."""
    from diffjev import passwords

    book = passwords.PasswordBook([("alice", "a-secret"), ("bob", hash_password("b-secret", n=2**12, r=4))])
    costs = []
    real = passwords._scrypt
    monkeypatch.setattr(
        passwords, "_scrypt", lambda pw, salt, n, r, p: costs.append((n, r, p)) or real(pw, salt, n, r, p)
    )
    assert not book.matches("bob", "wrong") and costs == [(2**12, 4, 1)]
    assert not book.matches("nobody", "wrong") and costs == [(2**12, 4, 1)] * 2
    # a plain password costs a hash too: the time does not tell which users keep theirs plain
    assert not book.matches("alice", "wrong") and costs == [(2**12, 4, 1)] * 3
    assert book.matches("alice", "a-secret") and len(costs) == 4
    assert book.matches("alice", "a-secret") and len(costs) == 4  # remembered once it matched
    assert not passwords.PasswordBook([("alice", "a-secret")]).matches("nobody", "x")  # all plain: nothing to hash
    assert len(costs) == 4


def test_a_forwarded_for_header_names_no_address_unless_its_proxy_is_trusted(studio, monkeypatch):
    """uvicorn believes X-Forwarded-For from 127.0.0.1 by default: anyone on this machine (or behind a
    tunnel) could fail logins from as many addresses as they name, or lock another's address out."""
    local = from_address("127.0.0.1")
    for k in range(ALLOWED):
        local.post(
            f"{studio.url}/login",
            data={"username": "alice", "password": "g"},
            headers={"X-Forwarded-For": f"10.1.0.{k}"},
        )
    refused = local.post(
        f"{studio.url}/login", data={"username": "bob", "password": "b-secret"}, headers={"X-Forwarded-For": "10.9.9.9"}
    )
    assert refused.status_code == 429 and "address 127.0.0.1" in refused.json()["detail"]  # its own address
    from diffjev.ui.studio import server_config

    monkeypatch.setenv("DIFFJEV_TRUSTED_PROXIES", "127.0.0.1")  # behind a proxy the studio is told of
    config = server_config(None, "127.0.0.1", 1)
    assert config.proxy_headers and config.forwarded_allow_ips == "127.0.0.1"


def test_failed_logins_under_ever_new_names_keep_a_bounded_table_and_short_log_lines(caplog):
    """Every name tried was kept for good, 60,000 characters each, and logged whole: an anonymous flood of
    failed logins grew the studio's memory and log without end."""
    from diffjev import auth_throttle
    from diffjev.auth_throttle import LoginThrottle

    now = [0.0]
    throttle = LoginThrottle(allowed=5, base_delay=1.0, clock=lambda: now[0])
    caplog.set_level(logging.WARNING, logger="diffjev")
    for k in range(auth_throttle.MAX_KEPT + 500):
        now[0] += 0.01
        assert not throttle.check(f"{k}-" + "x" * 60_000, f"10.0.{k // 250}.{k % 250}", lambda: False)
    assert len(throttle._failures) <= auth_throttle.MAX_KEPT
    assert max(len(key) for key in throttle._failures) <= auth_throttle.NAME_CHARS + 10
    assert max(len(r.getMessage()) for r in caplog.records) < 400
    now[0] += auth_throttle.FORGET_AFTER + 1  # once their failures no longer count, they are dropped
    throttle._forget(now[0])
    assert throttle._failures == {}
