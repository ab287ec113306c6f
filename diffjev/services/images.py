"""Items' images for the services: what an engine reads (the text and the image) and what the item card
shows, each found through the item's project, never by a path or a bare key from outside."""

from __future__ import annotations

from typing import Any, Sequence

from diffjev.images import ImageData, ImageState
from storage import images as image_store
from storage.db import Database


def _image_data(row: Any) -> ImageData:
    return ImageData(bytes(row.data), row.mime, row.width, row.height)


def item_states(session: Any, project_id: int, items: Sequence[Any]) -> list[Any]:
    """What an engine reads of each item: its text, or its text with its image (an ImageState)."""
    images = image_store.images_by_key(session, project_id, [i.image for i in items if i.image])
    return [
        ImageState(item.text, _image_data(images[item.image])) if item.image in images else item.text for item in items
    ]


def item_image(db: Database, project_id: int, item_id: int) -> ImageData | None:
    """The image of an item of this project, or None: an item of another project has none here."""
    with db.read() as session:
        row = image_store.item_image(session, project_id, item_id)
        return None if row is None else _image_data(row)
