"""Hub session cookies whose user signed out, by the sha256 of the cookie, refused until they would have
expired anyway: kept in the database, so a sign-out outlives the studio process that took it and holds
for every studio process on the same database."""

from __future__ import annotations

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from storage.models import SignedOutSession


def sign_out(session: Session, cookie_sha256: str, until: float, now: float) -> None:
    """Refuse the cookie until `until` (epoch seconds); the sign-outs that ran out are dropped meanwhile."""
    session.execute(delete(SignedOutSession).where(SignedOutSession.until <= now))
    found = session.get(SignedOutSession, cookie_sha256)
    if found is None:
        session.add(SignedOutSession(cookie_sha256=cookie_sha256, until=until))
    else:
        found.until = max(found.until, until)


def signed_out_until(session: Session, cookie_sha256: str) -> float | None:
    """When the cookie's sign-out runs out, where it was signed out."""
    return session.scalar(select(SignedOutSession.until).where(SignedOutSession.cookie_sha256 == cookie_sha256))
