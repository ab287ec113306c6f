"""Images in items: checked once on import, stored once per project by their sha256, read by engines that
take images, shown on the item card.

Only what a browser shows and Pillow decodes is taken (PNG, JPEG, GIF, WebP), and its type comes from its
bytes, never from a file name: a file named .png that holds HTML is refused as undecodable. A file past
`DIFFJEV_MAX_IMAGE` (20 MB unless set) is refused before it is read whole, and so is a small file that
decodes to more pixels than Pillow's decompression-bomb limit.

An image named by path is looked up inside one folder (the import folder): an absolute path, '..', or a
link that leads out of the folder is refused, so a row can never read the server's other files.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import re
import stat
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_IMAGE_BYTES = 20 * 1024 * 1024
# What a browser shows and Pillow decodes; the stored type is the one Pillow found in the bytes.
MIME_BY_FORMAT = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}
EXTENSION_BY_MIME = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}
_SIZE = re.compile(r"(\d+)\s*(b|kb|mb|gb)?", re.IGNORECASE)
_UNITS = {None: 1, "b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3}
# A Hub dataset file: https://huggingface.co/datasets/owner/name/resolve/revision/path/in/repo
HUB_FILE = re.compile(
    r"https://(?:www\.)?huggingface\.co/datasets/(?P<repo>[\w.-]+/[\w.-]+)/(?:resolve|blob)/(?P<revision>[^/]+)/"
    r"(?P<path>[^?#]+)"
)


class ImageProblem(ValueError):
    """Why one row's image cannot be imported; the message names the fix."""


class ImageSourceError(ValueError):
    """Why no row's image can be imported (an image setting, or a Hub file with no network)."""


@dataclass(frozen=True)
class ImageData:
    """An image's bytes as checked: its sha256, type and size in pixels."""

    data: bytes
    mime: str
    width: int
    height: int

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.data).hexdigest()

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def extension(self) -> str:
        return EXTENSION_BY_MIME[self.mime]

    def data_url(self) -> str:
        return f"data:{self.mime};base64,{base64.b64encode(self.data).decode('ascii')}"


@dataclass(frozen=True)
class ImageState:
    """An item as an engine reads it when it has an image: the text, and the image shown ahead of it."""

    text: str
    image: ImageData


def max_image_bytes() -> int:
    """The largest image imported: $DIFFJEV_MAX_IMAGE (bytes, or with kb, mb, gb), else 20 MB."""
    raw = os.environ.get("DIFFJEV_MAX_IMAGE", "").strip().replace("_", "")
    if not raw:
        return MAX_IMAGE_BYTES
    found = _SIZE.fullmatch(raw)
    if not found or int(found.group(1)) < 1:
        raise ImageSourceError(
            f"DIFFJEV_MAX_IMAGE={raw!r}: give the largest image to import as a size such as 20mb or 500kb"
        )
    return int(found.group(1)) * _UNITS[(found.group(2) or "b").lower()]


def _megabytes(size: int) -> str:
    return f"{size / 1024**2:.1f} MB"


def check_image(data: bytes, limit: int) -> ImageData:
    """The image in `data`, or ImageProblem: over `limit` bytes, not an image, or not one a browser shows."""
    from PIL import Image, UnidentifiedImageError

    if len(data) > limit:
        raise ImageProblem(
            f"the image is {_megabytes(len(data))}, over the limit of {_megabytes(limit)}; "
            f"shrink it, or raise DIFFJEV_MAX_IMAGE"
        )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as probe:
                probe.verify()  # reads the whole file: a truncated or corrupt one fails here
            with Image.open(io.BytesIO(data)) as image:
                image.load()
                kind, width, height = image.format, image.width, image.height
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise ImageProblem("the image has more pixels than Pillow decodes safely; shrink it") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError):
        raise ImageProblem("the file is not an image that can be decoded (PNG, JPEG, GIF or WebP)") from None
    mime = MIME_BY_FORMAT.get(kind or "")
    if mime is None:
        raise ImageProblem(f"a {kind} image is not taken; save it as PNG, JPEG, GIF or WebP")
    return ImageData(data, mime, width, height)


def read_image_file(name: str, folder: Path, limit: int) -> ImageData:
    """The image at `name`, a path inside `folder`; ImageProblem when it is outside, missing or too large.

    The path is resolved with every link followed before it is opened: a link inside the folder that points
    out of it is refused like '../'."""
    where = Path(name)
    if not name.strip() or "\x00" in name or where.is_absolute() or ".." in where.parts:
        raise ImageProblem(
            f"image path {name!r}: name the image relative to the import folder, without '..'; move it under it"
        )
    root = folder.resolve()
    resolved = (root / where).resolve()
    if not resolved.is_relative_to(root):
        raise ImageProblem(f"image path {name!r} leads outside the import folder; move the image under it")
    try:
        info = resolved.stat()
    except OSError:
        raise ImageProblem(f"no image at {name!r} in the import folder") from None
    if not stat.S_ISREG(info.st_mode):  # a folder, a device or a pipe (which would block the read)
        raise ImageProblem(f"{name!r} in the import folder is not a file")
    if info.st_size > limit:
        raise ImageProblem(
            f"the image {name!r} is {_megabytes(info.st_size)}, over the limit of {_megabytes(limit)}; "
            f"shrink it, or raise DIFFJEV_MAX_IMAGE"
        )
    with open(resolved, "rb") as f:
        data = f.read(limit + 1)  # the file may have grown since: never more than the limit is read
    return check_image(data, limit)


def image_from_value(value: Any, folder: Path | None, limit: int) -> ImageData | None:
    """A row's image cell as an ImageData; None for an empty cell.

    A cell is a path inside `folder`, a URL to a Hub dataset file, bytes, or a Hugging Face `Image`
    value (`{"bytes": ..., "path": ...}`)."""
    if value is None or (isinstance(value, float) and value != value) or value == "":
        return None
    if isinstance(value, dict) and ("bytes" in value or "path" in value):
        if value.get("bytes"):
            return check_image(bytes(value["bytes"]), limit)
        value = value.get("path")
        if not value:
            return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return check_image(bytes(value), limit)
    if not isinstance(value, str):
        raise ImageProblem(f"the image cell holds {type(value).__name__}; give a path, a Hub file URL or bytes")
    if re.match(r"[a-z][a-z0-9+.-]*://", value, re.IGNORECASE):
        return check_image(_hub_file(value, limit), limit)
    if folder is None:
        raise ImageProblem(f"image path {value!r}: this import names no folder to read images from")
    return read_image_file(value, folder, limit)


def _hub_file(url: str, limit: int) -> bytes:
    """The bytes of a Hub dataset file. Any other URL is refused: the server fetches nothing else."""
    found = HUB_FILE.fullmatch(url)
    if not found:
        raise ImageProblem(
            f"image URL {url[:200]!r}: only a Hugging Face Hub dataset file "
            f"(https://huggingface.co/datasets/owner/name/resolve/main/file.png) or a path is taken"
        )
    from diffjev.models import hub_reachable

    why = hub_reachable()
    if why is not None:  # every row would wait on the network: the import stops at once instead
        raise ImageSourceError(f"cannot fetch the image {url[:200]!r} from the Hugging Face Hub: {why}")
    from huggingface_hub import hf_hub_download

    try:
        local = hf_hub_download(found["repo"], found["path"], repo_type="dataset", revision=found["revision"])
    except Exception as exc:  # the Hub client raises many types; the row's reason is its message
        raise ImageProblem(f"cannot fetch the image {url[:200]!r}: {exc}") from None
    with open(local, "rb") as f:
        return f.read(limit + 1)
