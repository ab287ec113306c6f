"""A project's items as a collection: browse them in pages, open one with everything stored about it, and
delete the ones that should not be there (an answered item only when that is asked for in so many words)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from storage import items as item_store
from storage import repo
from storage.db import Database

PAGE_SIZE = 50
FILTERS = ("All", "Answered", "Unanswered")


class DeleteRefused(ValueError):
    """A deletion not done; the message says why and how to go ahead."""


@dataclass(frozen=True)
class ItemsPage:
    rows: list[item_store.ItemRow]
    matching: int  # capped at item_store.COUNT_CAP + 1
    offset: int

    def summary(self) -> str:
        if not self.rows:
            return "No items match." if self.offset == 0 else "No items on this page; go back a page."
        shown = f"{self.offset + 1}–{self.offset + len(self.rows)}"
        total = f"more than {item_store.COUNT_CAP:,}" if self.matching > item_store.COUNT_CAP else f"{self.matching:,}"
        return f"Items {shown} of {total}."


def browse(db: Database, project_name: str, search: str, which: str, page: int, size: int = PAGE_SIZE) -> ItemsPage:
    """One page of the items whose text holds `search` (or whose id is it), all or only (un)answered ones."""
    answered = {"Answered": True, "Unanswered": False}.get(which)
    offset = max(int(page) - 1, 0) * size
    if "\x00" in search:  # no stored item holds a NUL (import refuses it), and SQLite's LIKE stops at one
        return ItemsPage([], 0, offset)
    with db.read() as session:
        project_id = repo.get_project(session, project_name).id
        rows, matching = item_store.item_page(session, project_id, search.strip(), answered, offset, size)
    return ItemsPage(rows, matching, offset)


def open_item(db: Database, project_name: str, key: str) -> dict[str, Any]:
    """An item (by its own id, else its number) with its fields, answers and suggestions. The schema's
    hidden fields (a gold answer) stay out of it, as they stay off the annotator's card; only their names
    are given, and exports keep their values."""
    key = key.strip()
    with db.read() as session:
        project_id = repo.get_project(session, project_name).id
        item = item_store.find_item(session, project_id, key) if key else None
        if item is None:
            raise repo.NotFound(f"no item {key!r} in this project; give its id or its number in the Items table")
        hidden = repo.hidden_fields(session, project_id)
        fields = item.fields or {}
        return {
            "number": item.id,
            "id": item.external_id,
            "text": item.text,
            "fields": {k: v for k, v in fields.items() if k not in hidden},
            "hidden": sorted(k for k in fields if k in hidden),
            "answers": item_store.item_answers(session, item.id),
            "suggestions": item_store.item_suggestions(session, item.id),
        }


def delete_items(
    db: Database, project_name: str, numbers: Sequence[int], actor: str, *, confirmed: bool, with_answers: bool
) -> int:
    """Delete items by their numbers, after `confirmed`; an answered item goes only `with_answers` (its
    answers go with it). Returns how many were deleted; the audit trail names them."""
    if not numbers:
        raise DeleteRefused("no items selected: tick the items to delete in the table's page first")
    if not confirmed:
        raise DeleteRefused(
            f"delete {len(numbers)} item{'s' if len(numbers) != 1 else ''}? Tick 'Yes, delete the selected items' "
            f"and press Delete again"
        )

    def work(session) -> int:
        project_id = repo.get_project(session, project_name).id
        found = item_store.project_items(session, project_id, numbers)
        answered, answers = item_store.answered_counts(session, found)
        if answered and not with_answers:
            raise DeleteRefused(
                f"{answered} of the {len(found)} selected items {'is' if answered == 1 else 'are'} answered "
                f"({answers} answer{'s' if answers != 1 else ''}); nothing was deleted. Tick 'Also delete answered "
                f"items, with their answers' to delete them too, or leave them out of the selection"
            )
        deleted = item_store.delete_items(session, project_id, found)
        repo.log(session, actor, "items.deleted", project_id, items=sorted(found), answers_deleted=answers)
        return deleted

    return db.write(work)
