"""Unpacking a .zip that came from outside (an upload) into a folder, refusing what could write elsewhere
or fill the disk.

A zip member names its own path, so a crafted archive can name `../../home/x/.bashrc`, an absolute path,
or a link that later writes lead through; and a few kilobytes can inflate to gigabytes. Every member is
checked before anything is written, and bytes are counted as they are written, not taken from the
member's own header, which the archive's author chooses.
"""

from __future__ import annotations

import os
import shutil
import stat
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from diffjev.io import SourceError

MAX_UNPACKED_BYTES = 1 << 30  # 1 GiB: far more than any annotation project's JSON, far less than a disk
MAX_MEMBERS = 10_000
CHUNK = 1 << 20


def _member_path(info: zipfile.ZipInfo, name: str) -> PurePosixPath:
    """The member's path inside the folder, or SourceError naming the member and why it is refused."""
    raw = info.filename
    if "\x00" in raw or "\\" in raw or raw.startswith("/") or (len(raw) > 1 and raw[1] == ":"):
        raise SourceError(f"{name}: member {raw!r}: an absolute or Windows path; zip the folder with relative paths")
    parts = PurePosixPath(raw).parts
    if not parts:
        raise SourceError(f"{name}: member {raw!r}: names no file; zip the folder again")
    if any(part == ".." for part in parts):
        raise SourceError(f"{name}: member {raw!r}: points outside the archive's folder ('..'); zip the folder itself")
    kind = stat.S_IFMT(info.external_attr >> 16)  # 0 where the archiver stored permissions alone, or nothing
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise SourceError(f"{name}: member {raw!r}: a link or special file; zip plain files and folders only")
    return PurePosixPath(*parts)


def unpack_zip(
    archive: str | os.PathLike,
    folder: str | os.PathLike,
    name: str | None = None,
    max_bytes: int = MAX_UNPACKED_BYTES,
    max_members: int = MAX_MEMBERS,
) -> None:
    """Unpack `archive` into the existing, empty `folder`. `name` is how errors call the archive (the file
    name its sender knows, not where the server keeps it). A refused archive raises SourceError in one
    line and leaves `folder` empty."""
    name = name or Path(archive).name
    folder = Path(folder).resolve()
    try:
        with zipfile.ZipFile(archive) as zipped:
            members = zipped.infolist()
            if len(members) > max_members:
                raise SourceError(f"{name}: {len(members)} members, more than the {max_members} an upload may hold")
            paths = [(info, _member_path(info, name)) for info in members]  # every member checked first
            written = 0
            for info, relative in paths:
                target = folder.joinpath(*relative.parts)
                if not target.resolve().is_relative_to(folder):
                    raise SourceError(f"{name}: member {info.filename!r}: points outside the archive's folder")
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zipped.open(info) as src, open(target, "xb") as dst:
                    while chunk := src.read(CHUNK):
                        written += len(chunk)
                        if written > max_bytes:
                            raise SourceError(
                                f"{name}: unpacks to more than {max_bytes // (1 << 20)} MiB; upload a smaller dataset"
                            )
                        dst.write(chunk)
    except SourceError:
        _empty(folder)
        raise
    except FileExistsError as exc:
        _empty(folder)
        raise SourceError(f"{name}: member {Path(exc.filename).name!r} is in the archive twice") from None
    # RuntimeError: an encrypted member; NotImplementedError: a compression zipfile cannot read
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError, EOFError, zlib.error) as exc:
        _empty(folder)
        raise SourceError(f"{name}: not a readable .zip archive ({exc}); zip the folder again") from None


def _empty(folder: Path) -> None:
    for child in folder.iterdir():
        shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
