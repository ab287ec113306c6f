"""Reading items from files and datasets, and writing exports, with nothing half-done.

Reading streams: CSV and JSONL line by line, Parquet in record batches, a DataFrame or a Hugging Face
dataset in slices, so memory stays bounded however large the source. A bad row (no text, empty text,
text over the length cap, bytes that are not UTF-8, a lone surrogate escape, a NUL character, a line that
is not JSON or nests too deep, a field no JSON column can hold) is reported with its line or row number
and skipped; the rest is read. Every check that storing would trip over happens here, so a chunk of rows
that passed is stored whole on SQLite and PostgreSQL alike.

Writing goes to a temporary file beside the target and is renamed into place, so a crash never leaves a
half file under the final name. CSV cells a spreadsheet would run as formulas are escaped (csv_cell).
"""

from __future__ import annotations

import codecs
import csv
import dataclasses
import errno
import glob
import hashlib
import json
import math
import os
import re
import shutil
import sys
import uuid
import zipfile
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import orjson

from diffjev.images import ImageData, ImageProblem, ImageSourceError, image_from_value

FORMATS = ("csv", "jsonl", "parquet", "hf")
SLICE_ROWS = 10_000
# Characters a spreadsheet reads as the start of a formula (OWASP, "CSV Injection").
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
# A cell that is a plain number ("-5", "+3.2e4") is read as that number, never as a formula.
PLAIN_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


class SourceError(ValueError):
    """A source that cannot be imported at all (missing file, unknown format, no such text column)."""


@dataclass(frozen=True)
class Row:
    line: int  # the line (CSV, JSONL) or row number (Parquet, DataFrame, dataset) it came from, from 1
    text: str
    external_id: str | None
    fields: dict[str, Any]
    image: ImageData | None = None

    @property
    def content_hash(self) -> str:
        # Two items with the same text and different images are two items; a text-only item's hash is as before.
        parts = [self.text, self.fields] + ([self.image.sha256] if self.image is not None else [])
        body = orjson.dumps(parts, option=orjson.OPT_SORT_KEYS, default=str)
        return hashlib.sha256(body).hexdigest()


@dataclass(frozen=True)
class Rejected:
    line: int
    reason: str


@dataclass(frozen=True)
class HubDataset:
    """A dataset named on the Hugging Face Hub (owner/name). It is only ever fetched from the Hub: unlike a
    bare string, it never resolves to a file or folder on the server."""

    name: str

    def __str__(self) -> str:
        return self.name


def source_name(source: Any) -> str:
    """How a message names a source: a file or folder by its own name, never by where it lies on the server
    (an upload sits in the server's temporary folder, which is nobody's business on the page)."""
    if isinstance(source, HubDataset):
        return source.name
    if hasattr(source, "iterrows"):
        return "the DataFrame"
    if hasattr(source, "features") and hasattr(source, "iter"):
        return "the dataset"
    return Path(str(source)).name or str(source)


def source_format(source: Any) -> str:
    """csv, jsonl, parquet, dataframe, dataset, hf (a saved folder or a name) or hub (a HubDataset)."""
    if isinstance(source, HubDataset):
        return "hub"
    if hasattr(source, "iterrows"):
        return "dataframe"
    if hasattr(source, "features") and hasattr(source, "iter"):
        return "dataset"
    path = Path(str(source))
    suffix = path.suffix.lower()
    if suffix == ".csv":
        return "csv"
    if suffix in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if path.is_dir() or not path.suffix:
        return "hf"  # a dataset saved with save_to_disk, or a Hub dataset name
    raise SourceError(
        f"cannot import {source_name(source)}: use a .csv, .jsonl or .parquet file, a Hugging Face dataset "
        f"folder or name, or a pandas DataFrame"
    )


@dataclass(frozen=True)
class Limits:
    """What a row may hold to be stored: the longest text and the longest id, in characters."""

    max_text_chars: int | None = None
    max_id_chars: int | None = None


@dataclass(frozen=True)
class ImageColumn:
    """Where a source's rows name their image: the column, the folder a path in it must lie inside (None:
    no path is taken, only bytes and Hub files), and the largest image in bytes."""

    field: str
    folder: Path | None
    max_bytes: int


def read_rows(
    source: Any,
    text_field: str = "text",
    id_field: str | None = None,
    context_fields: Sequence[str] | None = None,
    split: str = "train",
    limits: Limits = Limits(),
    image: ImageColumn | None = None,
) -> Iterator[Row | Rejected]:
    """Rows of a source, each either a Row to import or the reason it was rejected.

    The text, id and image columns are never context too: an item would carry its text twice."""
    own = (text_field, id_field, image.field if image else None)
    if context_fields is not None:
        context_fields = [name for name in context_fields if name not in own]
    records = _records(source, source_format(source), split, image.field if image else None)
    columns = next(records)  # every reader yields its column names first (None when rows may differ)
    if columns is not None:
        _check_column_names(
            source, columns, [text_field, id_field, *(context_fields or ())] if context_fields is not None else columns
        )
        wanted = ((text_field, "the text field"), (id_field, "the id field"), (own[2], "the image field"))
        for needed, flag in wanted:
            if needed is not None and needed not in columns:
                raise SourceError(
                    f"{source_name(source)}: no column {needed!r} for {flag}; its columns are "
                    f"{', '.join(map(str, columns))}{_separator_hint(columns)}"
                )
        for name in context_fields or ():
            if name not in columns:
                raise SourceError(
                    f"{source_name(source)}: no context column {name!r}; its columns are {', '.join(map(str, columns))}"
                )
    for line, record in records:
        if isinstance(record, Rejected):
            yield record
            continue
        row = _row(line, record, text_field, id_field, context_fields, limits, own[2])
        yield row if image is None or isinstance(row, Rejected) else _with_image(row, record, image)


def _with_image(row: Row, record: dict[str, Any], image: ImageColumn) -> Row | Rejected:
    """The row with its image read and checked, or the reason the row is rejected."""
    try:
        found = image_from_value(record.get(image.field), image.folder, image.max_bytes)
    except ImageProblem as exc:
        return Rejected(row.line, f"image field {image.field!r}: {exc}")
    except ImageSourceError as exc:
        raise SourceError(f"line {row.line}, image field {image.field!r}: {exc}") from None
    return dataclasses.replace(row, image=found)


def _separator_hint(columns: Sequence[Any]) -> str:
    """A CSV header read as one column that holds semicolons or tabs: the file was saved with another
    separator (as spreadsheets in many locales save it), and only commas separate CSV columns here."""
    if len(columns) == 1:
        for name, mark in (("semicolons", ";"), ("tabs", "\t")):
            if mark in str(columns[0]):
                return f". The file looks separated by {name}: save it with commas as the separator"
    return ""


def _check_column_names(source: Any, columns: Sequence[Any], used: Sequence[Any]) -> None:
    """A column name with bytes that are not UTF-8 would be a key of every row's fields, and no row
    could be stored; the header is named instead of rejecting every row."""
    for position, name in enumerate(columns, start=1):
        if name in used and isinstance(name, str) and _undecodable(name):
            raise SourceError(
                f"{source_name(source)}: line 1, the header: column {position} ({name!r}) has bytes that are "
                f"not UTF-8; save the file as UTF-8, or leave that column out of the context "
                f"columns"
            )


@dataclass(frozen=True)
class Peek:
    """The first rows of a source, for choosing its columns: the column names, the first good rows, and the
    rows among those read that the import would reject too, each with its line."""

    columns: list[str]
    rows: list[dict[str, Any]]
    rejects: list[Rejected]


MAX_COLUMN_NAME = 500  # characters, as an item's id
PEEK_MAX_LINES = 200  # how far a preview reads for its good rows, so a file of bad rows is not read whole


def peek(source: Any, rows: int = 5, split: str = "train") -> Peek:
    """A source's column names and first good rows; the bad rows met on the way are named by line, as the
    import names them (bytes that are not UTF-8, a line that is not JSON, a wrong number of fields)."""
    records = _records(source, source_format(source), split)
    columns = next(records)
    first: list[dict[str, Any]] = []
    rejects: list[Rejected] = []
    for read, (line, record) in enumerate(records, start=1):
        problem = _peek_problem(line, record)
        if problem is None:
            first.append(record)
        else:
            rejects.append(problem)
        if len(first) >= rows or read >= PEEK_MAX_LINES:
            break
    if columns is None:  # JSONL: the fields of the first rows, in order of appearance
        columns = list(dict.fromkeys(k for r in first for k in r))
    columns = [str(c) for c in columns]
    for position, name in enumerate(columns, start=1):
        # a preview shows every name several times (table, pickers): a 2 MB name made a 16 MB page
        if len(name) > MAX_COLUMN_NAME:
            raise SourceError(
                f"{source_name(source)}: column {position}'s name has {len(name):,} characters, "
                f"over the {MAX_COLUMN_NAME} a column name may have; rename it"
            )
    return Peek(columns, first, rejects)


def _peek_problem(line: int, record: Any) -> Rejected | None:
    """Why a record cannot be shown or imported whatever columns are chosen, or None."""
    if isinstance(record, Rejected):
        return record
    if not isinstance(record, dict):
        return Rejected(line, "not an object with named fields")
    if any(isinstance(v, str) and _undecodable(v) for v in record.values()):
        return Rejected(line, "bytes that are not UTF-8")
    return None


def _records(source: Any, fmt: str, split: str, image_field: str | None = None) -> Iterator[Any]:
    """A reader over the source: its column names first (None when rows may differ), then (line, record).
    A dataset's `Image` column named by `image_field` comes as its stored bytes, not decoded."""
    if fmt in ("csv", "jsonl", "parquet") and not Path(source).is_file():
        raise SourceError(f"no file at {source_name(source)}")
    if fmt in ("csv", "jsonl"):
        _check_text_file(source)
    readers = {
        "csv": _csv_records,
        "jsonl": _jsonl_records,
        "parquet": _parquet_records,
        "dataframe": _dataframe_records,
        "dataset": lambda s: _dataset_records(_undecoded(s, image_field)),
        "hf": lambda s: _dataset_records(_undecoded(load_hf_dataset(s, split), image_field)),
        "hub": lambda s: _dataset_records(_undecoded(load_hf_dataset(s, split), image_field)),
    }
    return readers[fmt](source)


def _undecoded(dataset: Any, image_field: str | None) -> Any:
    """The dataset with its `Image` column as stored ({"bytes", "path"}): decoding every image to pixels
    only to encode it again would cost the import its time, and lose the file's own bytes."""
    import datasets

    feature = dataset.features.get(image_field) if image_field else None
    if isinstance(feature, datasets.Image) and feature.decode:
        return dataset.cast_column(image_field, datasets.Image(decode=False))
    return dataset


def _row(
    line: int,
    record: Any,
    text_field: str,
    id_field: str | None,
    context_fields: Sequence[str] | None,
    limits: Limits = Limits(),
    image_field: str | None = None,
) -> Row | Rejected:
    if not isinstance(record, dict):
        return Rejected(line, "not an object with named fields")
    text = record.get(text_field)
    if text is None or (isinstance(text, float) and text != text):  # None or NaN
        return Rejected(line, f"missing text field {text_field!r}")
    if isinstance(text, (dict, list)):
        return Rejected(line, f"text field {text_field!r} holds {type(text).__name__}, not text")
    text = str(text)
    if not text.strip():
        return Rejected(line, f"empty text in field {text_field!r}")
    problem = _text_problem(
        text,
        "text",
        text_field,
        limits.max_text_chars,
        "shorten or split the item, or raise the limit (--max-chars, DIFFJEV_MAX_ITEM_CHARS)",
    )
    if problem:
        return Rejected(line, problem)
    external = record.get(id_field) if id_field else None
    if isinstance(external, (dict, list, bool)):  # str() of these is no id: {'a': 1}, and True meets "True"
        return Rejected(
            line, f"the id field {id_field!r} holds {type(external).__name__}; an id is text or a whole number"
        )
    external = None if external is None or str(external).strip() == "" else str(external)
    if external is not None:
        problem = _text_problem(
            external, "id", id_field, limits.max_id_chars, "the items table holds no longer id; shorten it"
        )
        if problem:
            return Rejected(line, problem)
    own = (text_field, id_field, image_field)
    names = context_fields if context_fields is not None else [k for k in record if k not in own]
    fields = {name: _plain(record.get(name)) for name in names}
    if any(isinstance(v, str) and _undecodable(v) for v in fields.values()):
        return Rejected(line, "bytes that are not UTF-8")
    problem = _fields_problem(fields)
    if problem:
        return Rejected(line, problem)
    return Row(line, text, external, fields)


def unstorable_text(value: str, field_name: str) -> str | None:
    """Why an item's text cannot be stored (bytes not UTF-8, a lone surrogate escape, a NUL character), in the
    words `diffjev import` uses; None where it can."""
    return _text_problem(value, "text", field_name, None, "")


def item_problem(text: Any, external_id: Any, limits: Limits, text_field: str = "text") -> tuple[str, str] | None:
    """Why an item's text or id cannot be stored, as a plain import checks it: (the field, the reason), or None.
    For items that come whole from another tool's file rather than from rows."""
    found = _row(0, {text_field: text, "id": external_id}, text_field, "id", [], limits)
    if not isinstance(found, Rejected):
        return None
    field = "id" if "id field" in found.reason else "text"
    return field, found.reason


def _text_problem(
    value: str, kind: str, field_name: str | None, max_chars: int | None, over_limit_fix: str
) -> str | None:
    """Why a text or id cannot be stored as it is, or None."""
    if _undecodable(value):
        return "bytes that are not UTF-8"
    if _SURROGATE.search(value):
        return (
            f"a lone surrogate escape (such as \\ud800) in the {kind} field {field_name!r} is not valid "
            f"Unicode; write the whole surrogate pair or remove it"
        )
    if "\x00" in value:
        return f"a NUL character in the {kind} field {field_name!r}; remove it (databases cannot store it in text)"
    if max_chars is not None and len(value) > max_chars:
        return (
            f"the {kind} field {field_name!r} has {len(value):,} characters, over the limit of {max_chars:,}; "
            f"{over_limit_fix}"
        )
    return None


# What each refusal of the JSON encoder means for the person who wrote the file.
_JSON_PROBLEMS = {
    "surrogates not allowed": "holds a lone surrogate escape or bytes that are not UTF-8; write valid Unicode",
    "64-bit range": "holds an integer beyond 64 bits; write it as a string",
    "Recursion limit": "nests deeper than 254 levels; flatten it",
}


def _fields_problem(fields: dict[str, Any]) -> str | None:
    """Why the context fields cannot be stored as a JSON column (the encoder the database uses), or None;
    the offending field is named."""
    for name, value in fields.items():  # the JSON encoder would write an infinity as null: the value lost
        if _holds_infinity(value):
            return (
                f"context field {name!r} holds an infinite number (such as 1e999); write it as text or a finite number"
            )
    try:
        orjson.dumps(fields)
        return None
    except TypeError:
        pass
    for name, value in fields.items():
        try:
            orjson.dumps({name: value})
        except TypeError as exc:
            reason = next((why for key, why in _JSON_PROBLEMS.items() if key in str(exc)), f"cannot be stored: {exc}")
            return f"context field {name!r} {reason}"
    return "the context fields cannot be stored as JSON"


def _holds_infinity(value: Any, depth: int = 0) -> bool:
    if isinstance(value, float):
        return math.isinf(value)
    if depth < 300 and isinstance(value, dict):
        return any(_holds_infinity(v, depth + 1) for v in value.values())
    if depth < 300 and isinstance(value, list):
        return any(_holds_infinity(v, depth + 1) for v in value)
    return False


def _plain(value: Any) -> Any:
    """A value as JSON can hold it: NaN and numpy scalars become None and Python numbers."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    if hasattr(value, "item") and not isinstance(value, (list, dict, str)):
        try:
            return value.item()
        except (ValueError, AttributeError):
            pass
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (str, int, float, bool, list, dict)):
        return value
    return str(value)


# What surrogateescape leaves for each byte that is not UTF-8.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")
# Any surrogate: in a string read from JSON, a lone \udXXX escape; no database can encode it.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _undecodable(text: str) -> bool:
    return _ESCAPED_BYTE.search(text) is not None


NOT_TEXT_OR_PARQUET = (
    "{name} is not a text file (CSV, JSONL) or a Parquet file; save the items as UTF-8 CSV or JSONL, or as Parquet"
)


# Characters no text file holds: control characters (but tab, line and page breaks), and bytes not UTF-8.
_NOT_TEXT = re.compile("[\x00-\x08\x0e-\x1f\udc80-\udcff]")
NOT_TEXT_SHARE = 0.3  # random bytes score about 0.5; a Latin-1 file of accented words a few percent


def _check_text_file(path: Any) -> None:
    """A CSV or JSONL file must be text. One bad row is rejected by its line, but a binary file (an image, a
    zip, UTF-16 text) would be all bad rows: its first block, mostly characters no text holds, names it."""
    with open(path, "rb") as f:
        block = f.read(8192).decode("utf-8", errors="surrogateescape")
    if not block.strip():
        raise SourceError(f"{source_name(path)} is empty: it holds no column names and no rows")
    if len(_NOT_TEXT.findall(block)) > NOT_TEXT_SHARE * len(block):
        raise SourceError(NOT_TEXT_OR_PARQUET.format(name=source_name(path)))


class _CsvLines:
    """A CSV file's lines for csv.reader, counted, keeping those the record being read has taken: a record
    the reader refuses is left out by its first line alone, and the lines after it are read again, so one
    unclosed quote costs its own row, never the rows it ran on into."""

    def __init__(self, f: Any):
        self._file = f
        self._again: deque[str] = deque()
        self.taken: list[str] = []  # the lines of the record being read
        self.number = 0  # the number of the last line handed to the reader

    def __iter__(self) -> "_CsvLines":
        return self

    def __next__(self) -> str:
        line = self._again.popleft() if self._again else next(self._file)
        self.taken.append(line)
        self.number += 1
        return line

    def next_record(self) -> None:
        self.taken = []

    def refuse_record(self) -> None:
        """Leave out the record's first line; the reader reads the lines after it again."""
        rest = self.taken[1:]
        self._again.extendleft(reversed(rest))
        self.number -= len(rest)
        self.taken = []


def _quote_fix(error: csv.Error, ran_on: bool) -> str:
    """What is wrong with a record the strict reader refused, said as what to fix."""
    if ran_on:  # the record took the lines after its own: its quote is never closed where its field ends
        return "a quote opens a field here and is not closed on this line"
    if "expected after" in str(error):  # "abc" ,x
        return "text follows the closing quote of a field; remove it, or quote the whole field"
    return "a field's quotes do not match"


def _csv_records(path: Any) -> Iterator[Any]:
    csv.field_size_limit(min(sys.maxsize, 2**31 - 1))
    # surrogateescape keeps reading past bytes that are not UTF-8, so the row holding them can be named
    with open(path, newline="", encoding="utf-8-sig", errors="surrogateescape") as f:
        lines = _CsvLines(f)
        # strict: a quote closed anywhere but at a field's end is an error; the lenient reader ran an
        # unclosed quote on into the rows after it and stored them as one item, or dropped them
        reader = csv.reader(lines, strict=True)
        try:
            header = next(reader)
        except StopIteration:
            yield []
            return
        except csv.Error as exc:
            fix = _quote_fix(exc, lines.number > 1)
            raise SourceError(f"{source_name(path)}, line 1 (the column names): {fix} ({exc})") from None
        yield header
        while True:
            line = lines.number + 1
            lines.next_record()
            try:
                values = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                fix = _quote_fix(exc, lines.number > line)
                lines.refuse_record()
                yield (
                    line,
                    Rejected(
                        line,
                        f"{fix} ({exc}); the lines after it are read on their own. A field with a "
                        'comma, a quote or a line break is written in quotes, each quote inside it doubled ("")',
                    ),
                )
                continue
            if not values:
                continue
            if len(values) != len(header):
                yield line, Rejected(line, f"{len(values)} fields where the header has {len(header)}")
                continue
            yield line, dict(zip(header, values))


def _jsonl_records(path: Any) -> Iterator[Any]:
    yield None  # each line names its own fields
    with open(path, "rb") as f:
        for line, raw in enumerate(f, start=1):
            if line == 1 and raw.startswith(codecs.BOM_UTF8):  # as Windows tools write UTF-8; CSV skips it too
                raw = raw[len(codecs.BOM_UTF8) :]
            if not raw.strip():
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                yield line, Rejected(line, "bytes that are not UTF-8")
                continue
            try:
                record = json.loads(text)
            except ValueError as exc:
                # JSONDecodeError has `msg`; Python's limit on an integer's digits is a plain ValueError
                yield line, Rejected(line, f"not valid JSON ({getattr(exc, 'msg', exc)})")
            except RecursionError:
                yield line, Rejected(line, "JSON nested too deep to read (about 1,000 levels at most); flatten it")
            else:
                # The line decoded as UTF-8, so a surrogate in it came from a \udXXX escape, never from a byte:
                # name it as one (later checks cannot tell the two apart once parsed).
                yield line, _escaped_surrogate(line, record) or record


def _escaped_surrogate(line: int, record: Any) -> Rejected | None:
    if not isinstance(record, dict):
        return None
    for name, value in record.items():  # a surrogate in a field's name is named by the field checks
        if isinstance(value, str) and _SURROGATE.search(value):
            shown = name.encode("utf-8", "backslashreplace").decode("utf-8")  # shows a surrogate as its escape
            return Rejected(
                line,
                f"a lone surrogate escape (such as \\ud800) in the field {shown!r} is not valid Unicode; "
                f"write the whole surrogate pair or remove it",
            )
    return None


# Parquet is compressed: 29 KB of zstd held three values of 300 MB each. Its metadata says how large each
# row group's columns unpack to, so nothing is decoded whose values are, on average, larger than anything
# the studio stores (an item's text is 100,000 characters, an image 20 MB by default), and each batch is
# sized to unpack to about PARQUET_BATCH_BYTES.
PARQUET_VALUE_BYTES = 64 * 1024 * 1024
PARQUET_BATCH_BYTES = 64 * 1024 * 1024


def _parquet_records(path: Any) -> Iterator[Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        f = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError):  # its message names the server's path: the user needs what it is
        raise SourceError(NOT_TEXT_OR_PARQUET.format(name=source_name(path))) from None
    yield f.schema_arrow.names
    row = 0
    for group in range(f.metadata.num_row_groups):
        per_row = _row_group_bytes_per_row(path, f.metadata.row_group(group), row)
        batch_rows = max(1, min(SLICE_ROWS, PARQUET_BATCH_BYTES // max(1, per_row)))
        for batch in f.iter_batches(batch_size=batch_rows, row_groups=[group]):
            for record in batch.to_pylist():
                row += 1
                yield row, record


def _row_group_bytes_per_row(path: Any, group: Any, rows_before: int) -> int:
    """What a row of this row group unpacks to, on average (metadata only); SourceError where one of its
    columns averages more than any value the studio stores, so at least one value is that large."""
    rows = max(1, group.num_rows)
    total = 0
    for c in range(group.num_columns):
        column = group.column(c)
        size = column.total_uncompressed_size
        total += size
        if size / rows > PARQUET_VALUE_BYTES:
            raise SourceError(
                f"{source_name(path)}: rows {rows_before + 1}-{rows_before + group.num_rows}, column "
                f"{column.path_in_schema!r}: its values unpack to {size / rows / 2**20:,.1f} MB each on average, "
                f"past the {PARQUET_VALUE_BYTES / 2**20:g} MB any item's value may be; leave those rows "
                "out of the file"
            )
    return total // rows


def _dataframe_records(frame: Any) -> Iterator[Any]:
    yield [str(c) for c in frame.columns]
    for start in range(0, len(frame), SLICE_ROWS):
        for offset, record in enumerate(frame.iloc[start : start + SLICE_ROWS].to_dict("records")):
            yield start + offset + 1, {str(k): v for k, v in record.items()}


def _dataset_records(dataset: Any) -> Iterator[Any]:
    yield list(dataset.column_names)
    row = 0
    for batch in dataset.iter(batch_size=SLICE_ROWS):
        names = list(batch)
        for values in zip(*(batch[n] for n in names)):
            row += 1
            yield row, dict(zip(names, values))


def load_hf_dataset(source: Any, split: str = "train") -> Any:
    """A dataset folder written by save_to_disk, or a Hub name (tried only when the Hub answers)."""
    import datasets

    path = Path(str(source))
    if not isinstance(source, HubDataset) and path.is_dir():
        try:
            loaded = datasets.load_from_disk(str(path))
        except (FileNotFoundError, ValueError) as exc:
            raise SourceError(
                f"{source_name(source)} is not a dataset folder written by save_to_disk: "
                f"{str(exc).replace(str(path), source_name(source))}"
            ) from None
    else:
        from diffjev.models import hub_reachable

        why = hub_reachable()
        if why is not None:
            raise SourceError(f"cannot load the dataset {source_name(source)!r}: it is not a local folder and {why}")
        try:
            if isinstance(source, HubDataset):  # download the Hub's copy; load_dataset(name) would look locally first
                from huggingface_hub import snapshot_download

                loaded = datasets.load_dataset(snapshot_download(source.name, repo_type="dataset"))
            else:
                loaded = datasets.load_dataset(str(source))
        except Exception as exc:  # the Hub client raises many types; the user needs the message
            raise SourceError(f"cannot load the dataset {source_name(source)!r}: {exc}") from None
    if hasattr(loaded, "keys"):  # a DatasetDict
        if split not in loaded:
            raise SourceError(
                f"{source_name(source)} has no split {split!r}; its splits are {', '.join(loaded.keys())}"
            )
        loaded = loaded[split]
    return loaded


# Writing ------------------------------------------------------------------------------------------------


class ExportError(Exception):
    """An export that could not be written (a full disk, a folder that cannot be written); nothing was
    left under the export's name."""


def _sweep_partials(target: Path) -> None:
    """Remove what killed exports to `target` left behind: their temporary files carry the writer's pid."""
    for leftover in target.parent.glob(f".{glob.escape(target.name)}.*.partial"):
        pid = leftover.name[len(target.name) + 2 :].split(".", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        shutil.rmtree(leftover, ignore_errors=True) if leftover.is_dir() else leftover.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fresh_partial(target: Path, directory: bool) -> Path:
    """A new, empty temporary file or folder beside `target`, named for this process.

    Made with the ordinary modes (0o666 / 0o777 less the umask), as writing the target directly would:
    tempfile's mkstemp and mkdtemp make them private (0o600 / 0o700), and the rename would keep that, so an
    export would be unreadable to the group that can read its folder."""
    prefix = f".{target.name}.{os.getpid()}."
    for _ in range(100):
        temp = target.parent / f"{prefix}{uuid.uuid4().hex[:12]}.partial"
        try:
            if directory:
                os.mkdir(temp)
            else:
                os.close(os.open(temp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
            return temp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name beside the target", str(target))


@contextmanager
def atomic_path(target: str | os.PathLike, directory: bool = False) -> Iterator[Path]:
    """A temporary path beside `target`, moved onto it only when the block finishes without error.

    A process killed mid-write cannot remove its temporary file; its name holds the pid, and the next
    write to the same target removes it.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    _sweep_partials(target)
    temp = _fresh_partial(target, directory)
    try:
        yield temp
        if directory:
            backup = None
            if target.exists():
                backup = target.with_name(f".{target.name}.{os.getpid()}.old.partial")
                os.replace(target, backup)
            os.replace(temp, target)
            if backup is not None:
                shutil.rmtree(backup, ignore_errors=True)
        else:
            with open(temp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(temp, target)
    finally:
        if temp.exists():
            shutil.rmtree(temp, ignore_errors=True) if temp.is_dir() else temp.unlink()


def csv_cell(value: Any, escape: bool = True) -> Any:
    """A CSV cell: nested values as JSON text, and, with `escape`, a string that a spreadsheet would run
    as a formula prefixed with a single quote.

    Why: Excel, LibreOffice and Google Sheets run a cell that starts with = + - @ (or a tab or CR, which
    some strip first) as a formula, so an imported text such as `=HYPERLINK(...)` would run on the machine
    of whoever opens the export. OWASP's advice (CSV Injection) is the leading quote, which spreadsheets
    show as text. Only strings are escaped: numbers (ids, confidences, counts) are written as numbers, and
    a string that is a plain number such as "-5" is read by a spreadsheet as that number, so it stays as
    it is. `escape=False` (`--no-csv-escape`, `DIFFJEV_CSV_ESCAPE=0`) writes every string verbatim, for
    tools that read the CSV as data rather than open it as a sheet.
    """
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)  # starts with { or [: never a formula
    if escape and isinstance(value, str) and value.startswith(FORMULA_START) and not PLAIN_NUMBER.fullmatch(value):
        return "'" + value
    return value


def _write_csv_rows(writer: Any, rows: Iterable[Sequence[Any]], escape: bool) -> None:
    writer.writerows([csv_cell(v, escape) for v in row] for row in rows)


def write_csv(
    target: str | os.PathLike, columns: Sequence[str], rows: Iterable[Sequence[Any]], escape: bool = True
) -> None:
    """A small table as CSV, atomically, with the same cells as the CSV export (see csv_cell)."""
    with atomic_path(target) as temp:
        with open(temp, "w", encoding="utf-8", newline="") as f:
            writer = csv.writer(f)
            writer.writerow([csv_cell(c, escape) for c in columns])
            _write_csv_rows(writer, rows, escape)


def write_export(
    batches: Iterable[dict[str, list]],
    target: str | os.PathLike,
    fmt: str,
    arrow_schema: Any,
    on_batch: Callable[[int], None] | None = None,
    csv_escape: bool = True,
    finish: Callable[[Path], None] | None = None,
) -> int:
    """Write column batches ({column: values}, in `arrow_schema`'s column order) to `target` atomically;
    returns the number of records. Columns, not records: a batch goes to Arrow with no per-row work.
    `finish` (hf only) adds files to the dataset folder once its rows are written, before it is moved
    into place: a dataset card that describes the rows goes in with them or not at all."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if finish is not None and fmt != "hf":
        raise ValueError("only the hf format is a folder that other files can join")
    try:
        return _write_export(batches, target, fmt, arrow_schema, on_batch, csv_escape, finish)
    except OSError as exc:
        raise _export_error(exc, target) from None


def _export_error(exc: OSError, target: str | os.PathLike) -> ExportError:
    """A disk's refusal (full, read-only, not ours) as the ExportError that says so; any other error as is."""
    # Arrow's writer reports a full disk with no errno, only in its message.
    full = "No space left on device" in str(exc)
    if not full and exc.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EACCES, errno.EROFS):
        raise exc
    reason = "no space left on device" if full or exc.errno == errno.ENOSPC else exc.strerror
    # The file's name only: the studio shows this message, and a page never says where the server keeps files.
    return ExportError(
        f"the export could not be written to {Path(target).name}: {reason}. Nothing was written under "
        f"that name; free some space or choose another folder"
    )


def write_zip(target: str | os.PathLike, entries: dict[str, Path]) -> None:
    """One .zip at `target`, atomically, holding each entry under its name: a file, or a folder with every
    file under it (named by its path inside the folder). A failure leaves nothing under `target`."""
    try:
        with atomic_path(target) as temp, zipfile.ZipFile(temp, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, path in entries.items():
                archive.write(path, name)
                if path.is_dir():
                    for inner in sorted(path.rglob("*")):
                        archive.write(inner, f"{name}/{inner.relative_to(path).as_posix()}")
    except OSError as exc:
        raise _export_error(exc, target) from None


def _write_export(
    batches: Iterable[dict[str, list]],
    target: str | os.PathLike,
    fmt: str,
    arrow_schema: Any,
    on_batch: Callable[[int], None] | None,
    csv_escape: bool,
    finish: Callable[[Path], None] | None = None,
) -> int:
    names = list(arrow_schema.names)
    count = 0
    with atomic_path(target, directory=fmt == "hf") as temp:
        if fmt in ("jsonl", "csv"):
            with open(temp, "w", encoding="utf-8", newline="") as f:
                writer = csv.writer(f)
                if fmt == "csv":  # a column may be named by a file's own header (the import's id field)
                    writer.writerow([csv_cell(n, csv_escape) for n in names])
                for batch in batches:
                    rows = zip(*(batch[n] for n in names))
                    if fmt == "jsonl":
                        f.writelines(orjson.dumps(dict(zip(names, row))).decode() + "\n" for row in rows)
                    else:
                        _write_csv_rows(writer, rows, csv_escape)
                    count += len(batch[names[0]])
                    on_batch and on_batch(count)
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            parquet = temp if fmt == "parquet" else temp / "data.parquet"
            with pq.ParquetWriter(parquet, arrow_schema) as writer:
                for batch in batches:
                    writer.write_table(pa.Table.from_pydict(batch, schema=arrow_schema))
                    count += len(batch[names[0]])
                    on_batch and on_batch(count)
                    del batch  # let go before the next is made: a batch of images is the export's memory
            if fmt == "hf":
                import datasets

                dataset = datasets.Dataset.from_parquet(str(parquet), cache_dir=str(temp / ".cache"))
                dataset.save_to_disk(str(temp / "dataset"))
                del dataset
                shutil.rmtree(temp / ".cache", ignore_errors=True)
                parquet.unlink()
                for child in (temp / "dataset").iterdir():
                    os.replace(child, temp / child.name)
                (temp / "dataset").rmdir()
                if finish is not None:
                    finish(temp)
    return count
