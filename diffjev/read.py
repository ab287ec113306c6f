"""The two calls a user makes: read one item, or stream many through an engine."""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from diffjev.decide import Decision
from diffjev.engines.base import DEFAULT_SEED, Engine
from diffjev.schema import Schema


def read(schema: Schema, state: Any, engine: Engine, *, seed: int = DEFAULT_SEED) -> Decision:
    """Answer every question of `schema` about one state (text, or anything JSON-serialisable)."""
    return next(engine.decide_many(schema, [state], seed))


def read_many(schema: Schema, states: Iterable[Any], engine: Engine, *, seed: int = DEFAULT_SEED) -> Iterator[Decision]:
    """One Decision per state, in order; the engine batches and pipelines the reads."""
    return engine.decide_many(schema, states, seed)
