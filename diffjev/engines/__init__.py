"""Engines: one adapter per way of running a model. Each is imported only when asked for, so using
one never pulls in the libraries of another (torch for the HTTP clients, httpx for in-process ones)."""

from importlib import import_module
from typing import Any

from diffjev.engines.base import CanvasEngine, Engine, EngineError

_WHERE = {
    "VLLMServerEngine": "diffjev.engines.vllm",
    "JevAPIEngine": "diffjev.engines.jev_api",
    "TransformersEngine": "diffjev.engines.transformers",
    "AutoregressiveEngine": "diffjev.engines.autoregressive",
}

__all__ = ["CanvasEngine", "Engine", "EngineError", *_WHERE]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'diffjev.engines' has no attribute {name!r}")
