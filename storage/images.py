"""A project's images: stored once by their sha256 however many items show them, and read only through an
item of the project (another project's item, or an image no item of the project shows, is simply not found)."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from sqlalchemy import delete, exists, func, select
from sqlalchemy.orm import Session

from storage.models import Image, Item, utcnow


def _insert_ignoring_duplicates(session: Session):
    """INSERT ... ON CONFLICT DO NOTHING in the session's dialect: two imports storing the same image at once
    both succeed, and the image is there once."""
    if session.get_bind().dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(Image).on_conflict_do_nothing(index_elements=[Image.project_id, Image.sha256])


IMAGES_LOCK = 0x696D67  # the advisory lock class of a project's images ("img"); the project id is the other key


def _lock_project_images(session: Session, project_id: int) -> None:
    """Hold the project's images until the transaction ends, on PostgreSQL: an import that finds an image
    already stored and a delete of that image's last item would each miss the other's uncommitted rows, and
    the import's items would name an image the delete removed. SQLite's writers already go one at a time."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(select(func.pg_advisory_xact_lock(IMAGES_LOCK, project_id)))


def store_images(session: Session, project_id: int, images: Iterable[Any]) -> int:
    """Store the images (objects with data, mime, width, height, sha256) this project does not hold yet;
    returns how many were new."""
    unique = {image.sha256: image for image in images}
    if not unique:
        return 0
    _lock_project_images(session, project_id)
    held = set(
        session.scalars(select(Image.sha256).where(Image.project_id == project_id, Image.sha256.in_(list(unique))))
    )
    fresh = [
        {
            "project_id": project_id,
            "sha256": sha,
            "mime": image.mime,
            "size": len(image.data),
            "width": image.width,
            "height": image.height,
            "data": image.data,
            "created_at": utcnow(),
        }
        for sha, image in unique.items()
        if sha not in held
    ]
    if fresh:
        session.execute(_insert_ignoring_duplicates(session), fresh)
    return len(fresh)


def item_image(session: Session, project_id: int, item_id: int) -> Image | None:
    """The image of an item of this project, or None (no image, or not this project's item)."""
    return session.scalar(
        select(Image)
        .join(Item, (Item.image == Image.sha256) & (Item.project_id == Image.project_id))
        .where(Item.project_id == project_id, Item.id == item_id)
    )


def item_image_keys(session: Session, project_id: int, item_ids: Sequence[int]) -> dict[int, str]:
    """item id -> the sha256 of its image, for the items of this project among `item_ids` that have one."""
    if not item_ids:
        return {}
    rows = session.execute(
        select(Item.id, Item.image).where(
            Item.project_id == project_id, Item.id.in_(list(item_ids)), Item.image.is_not(None)
        )
    )
    return {item_id: sha for item_id, sha in rows}


def images_by_key(session: Session, project_id: int, keys: Iterable[str]) -> dict[str, Image]:
    """This project's images among these sha256 keys."""
    wanted = list(set(keys))
    if not wanted:
        return {}
    found = session.scalars(select(Image).where(Image.project_id == project_id, Image.sha256.in_(wanted)))
    return {image.sha256: image for image in found}


def image_files(session: Session, project_id: int, keys: Iterable[str]) -> dict[str, tuple[bytes, str]]:
    """sha256 -> (bytes, mime) of this project's images among these keys: the bytes alone, no row objects
    kept in the session, so a caller holds exactly the images it asked for."""
    wanted = list(set(keys))
    if not wanted:
        return {}
    rows = session.execute(
        select(Image.sha256, Image.data, Image.mime).where(Image.project_id == project_id, Image.sha256.in_(wanted))
    )
    return {sha: (bytes(data), mime) for sha, data, mime in rows}


def project_has_images(session: Session, project_id: int) -> bool:
    return bool(session.scalar(select(exists().where(Item.project_id == project_id, Item.image.is_not(None)))))


def image_keys_of(session: Session, project_id: int, items: Any) -> list[str]:
    """The sha256 keys the items chosen by `items` (a where clause on Item) name, each once."""
    return list(
        session.scalars(
            select(Item.image).where(Item.project_id == project_id, Item.image.is_not(None), items).distinct()
        )
    )


def drop_unshown_images(session: Session, project_id: int, keys: Sequence[str]) -> int:
    """Delete those of these images no item of the project names any more; returns how many. Called in the
    transaction that removed the items, so an image never outlives its last item, nor goes before it."""
    if not keys:
        return 0
    _lock_project_images(session, project_id)  # its DELETE then sees the items of an import that held it
    shown = exists().where(Item.project_id == project_id, Item.image == Image.sha256)
    return session.execute(
        delete(Image).where(Image.project_id == project_id, Image.sha256.in_(list(keys)), ~shown)
    ).rowcount
