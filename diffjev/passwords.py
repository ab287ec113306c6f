"""Password hashes for `DIFFJEV_USERS`, so plain passwords need not sit in the environment.

The format is Werkzeug's scrypt string, `scrypt:N:r:p$salt$hex`, the default of Flask's
`generate_password_hash`: a hash made there works here, and `diffjev hash-password` makes one with
hashlib alone. A stored value that does not start with `scrypt:` is a plain password.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import Counter

SCRYPT = "scrypt"
N, R, P = 2**15, 8, 1  # Werkzeug's defaults: 32 MiB and about 0.1 s per check
SALT_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"


class BadHash(ValueError):
    """A stored value that starts like a scrypt hash but is not one; the message says how to make one."""


def is_hash(stored: str) -> bool:
    return stored.startswith(SCRYPT + ":")


def hash_password(password: str, n: int = N, r: int = R, p: int = P) -> str:
    salt = "".join(secrets.choice(SALT_CHARS) for _ in range(16))
    return f"{SCRYPT}:{n}:{r}:{p}${salt}${_scrypt(password, salt, n, r, p)}"


def check_hash(stored: str) -> tuple[int, int, int, str, str]:
    """(n, r, p, salt, hex digest) of a scrypt string; BadHash when it is malformed."""
    method, _, rest = stored.partition("$")
    salt, _, digest = rest.partition("$")
    try:
        name, n, r, p = method.split(":")
        n, r, p = int(n), int(r), int(p)
        bytes.fromhex(digest)
    except ValueError:
        raise BadHash(
            "is not a scrypt hash of the form scrypt:N:r:p$salt$hex; make one with `diffjev hash-password`"
        ) from None
    if name != SCRYPT or not salt or not digest or n < 2 or n & (n - 1):
        raise BadHash(
            "is not a scrypt hash of the form scrypt:N:r:p$salt$hex (N a power of two); make one with "
            "`diffjev hash-password`"
        )
    return n, r, p, salt, digest


def verify(stored: str, password: str) -> bool:
    """Whether `password` matches the stored hash or plain password, in constant time."""
    if not is_hash(stored):
        return secrets.compare_digest(stored.encode(), password.encode())
    n, r, p, salt, digest = check_hash(stored)
    return hmac.compare_digest(_scrypt(password, salt, n, r, p), digest)


def _scrypt(password: str, salt: str, n: int, r: int, p: int) -> str:
    # The memory limit as Werkzeug sets it: OpenSSL's default (32 MiB) is just short of N=2**15, r=8.
    return hashlib.scrypt(password.encode(), salt=salt.encode(), n=n, r=r, p=p, maxmem=132 * n * r * p).hex()


class PasswordBook:
    """Users and their stored passwords. A password that matched once is remembered as a keyed digest in
    memory, so HTTP Basic on every API request does not pay scrypt's 0.1 s each time."""

    def __init__(self, users: list[tuple[str, str]]):
        self.stored = dict(users)
        self._key = secrets.token_bytes(32)
        self._known: dict[str, bytes] = {}
        # What an unknown name, and a plain password, is also checked against, so that every check costs
        # what a hashed one does and the time of a refusal tells no one which names exist or which
        # passwords are stored plain: a hash at the users' most common cost (users hashed at another cost
        # still take their own time), else a plain stand-in.
        costs = Counter(check_hash(stored)[:3] for stored in self.stored.values() if is_hash(stored))
        self._hashed = bool(costs)
        if costs:
            n, r, p = costs.most_common(1)[0][0]
            self._stand_in = hash_password(secrets.token_hex(16), n, r, p)
        else:
            self._stand_in = secrets.token_hex(16)

    def matches(self, username: str, password: str) -> bool:
        stored = self.stored.get(username)
        if stored is None:
            verify(self._stand_in, password)
            return False
        digest = hmac.new(self._key, f"{username}\0{password}".encode(), "sha256").digest()
        known = self._known.get(username)
        if known is not None and hmac.compare_digest(known, digest):
            return True
        if self._hashed and not is_hash(stored):
            verify(self._stand_in, password)
        if not verify(stored, password):
            return False
        self._known[username] = digest
        return True
