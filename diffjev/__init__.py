"""diffjev: structured reads from discrete diffusion language models, for model-assisted labeling."""

from diffjev.decide import Answer, Decision
from diffjev.engines.base import EngineError
from diffjev.read import read, read_many
from diffjev.schema import Question, Schema, SchemaError
from diffjev.spans import Span, SpanAnswer  # also registers the span and spans question types
from diffjev.template import Template

__all__ = [
    "Answer",
    "Decision",
    "EngineError",
    "Question",
    "Schema",
    "SchemaError",
    "Span",
    "SpanAnswer",
    "Template",
    "read",
    "read_many",
]
