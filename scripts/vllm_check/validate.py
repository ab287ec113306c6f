"""Validate diffjev's wire traffic with vLLM's own request and response models.

Runs inside `.venv-vllm-check` (built by `scripts/check-vllm`), where the real `vllm` package is installed;
never imported by diffjev. Each argument is a JSON Lines file, one sample per line:

    {"kind": "chat_request", "name": "...", "body": {...}, "canvas_length": 64, "vocab_size": 262144}

Kinds: chat_request, completion_request, systemone_request, decisions_request (bodies diffjev's clients send)
and chat_response, completion_response, systemone_response, decisions_response, error_response (answers
diffjev's servers give). A request is validated by its pydantic model and, for a chat or completions read,
also turned into vLLM's SamplingParams and checked by its diffusion rules (`vllm/utils/diffusion.py`) as the
server does at admission. A response is validated by its model, and a field the model does not have is a
failure too: vLLM's models allow extra fields, a client reading vLLM's answers would never see them.

Prints one line per failure and a summary naming the vLLM version; exit status 1 when any sample fails.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pydantic import BaseModel, ValidationError

import vllm
from vllm.entrypoints.generate.structured_decisions.protocol import (
    StructuredDecisionRequest,
    StructuredDecisionResponse,
)
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest, ChatCompletionResponse
from vllm.entrypoints.openai.completion.protocol import CompletionRequest, CompletionResponse
from vllm.entrypoints.openai.decisions.protocol import DecisionRequest, DecisionResponse
from vllm.entrypoints.serve.engine.protocol import ErrorResponse

MODELS: dict[str, type[BaseModel]] = {
    "chat_request": ChatCompletionRequest,
    "completion_request": CompletionRequest,
    "completion_response": CompletionResponse,
    "systemone_request": StructuredDecisionRequest,
    "decisions_request": DecisionRequest,
    "chat_response": ChatCompletionResponse,
    "systemone_response": StructuredDecisionResponse,
    "decisions_response": DecisionResponse,
    "error_response": ErrorResponse,
}


def extras(value: Any, where: str = "") -> list[str]:
    """Every field a parsed model kept as extra (not one of its own), by its path."""
    found: list[str] = []
    if isinstance(value, BaseModel):
        for key in value.model_extra or {}:
            found.append(f"{where}.{key}".lstrip("."))
        for name in type(value).model_fields:
            found += extras(getattr(value, name), f"{where}.{name}")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            found += extras(item, f"{where}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            found += extras(item, f"{where}.{key}")
    return found


def check_read(request: ChatCompletionRequest | CompletionRequest, sample: dict[str, Any]) -> None:
    """The sampling params vLLM makes of the request, checked by its diffusion admission rules."""
    from vllm.utils.diffusion import validate_diffusion_sampling_params

    params = request.to_sampling_params(request.max_tokens or sample["canvas_length"], {})
    validate_diffusion_sampling_params(params, canvas_length=sample["canvas_length"], vocab_size=sample["vocab_size"])
    if params.logprob_token_ids is not None and len(params.logprob_token_ids) > 128:
        raise ValueError("logprob_token_ids: more than the 128 ids vLLM takes")


# Fields diffjev adds on purpose for System One clients (systemone-client, krite-bench), which vLLM's own
# clients ignore: a read's `latency_ms`, and a refusal's `detail` (its message again). Any other is a failure.
SYSTEM_ONE_EXTRAS = {"systemone_response": ("latency_ms",), "error_response": ("detail",)}


def check(sample: dict[str, Any]) -> str | None:
    """None when the sample passes; else what is wrong."""
    model = MODELS.get(sample.get("kind"))
    if model is None:
        return f"unknown kind {sample.get('kind')!r}; kinds: {', '.join(MODELS)}"
    try:
        parsed = model.model_validate(sample["body"])
        if sample["kind"] in ("chat_request", "completion_request"):
            check_read(parsed, sample)
    except ValidationError as exc:
        return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
    except Exception as exc:  # vLLM's own admission errors (VLLMValidationError, ValueError)
        return f"{type(exc).__name__}: {exc}"
    unknown = [name for name in extras(parsed) if name not in SYSTEM_ONE_EXTRAS.get(sample["kind"], ())]
    if unknown and sample["kind"].endswith("_response"):
        return f"fields vLLM's {model.__name__} does not have: {', '.join(unknown)}"
    if unknown and sample["kind"] in ("chat_request", "completion_request"):
        return f"fields vLLM's {model.__name__} does not have (vLLM ignores them): {', '.join(unknown)}"
    return None


def main(paths: list[str]) -> int:
    failures = total = 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                total += 1
                sample = json.loads(line)
                problem = check(sample)
                if problem is not None:
                    failures += 1
                    print(f"FAIL {path}:{n} {sample.get('kind')} {sample.get('name')}: {problem}")
    print(f"vllm {vllm.__version__}: {total - failures} of {total} samples pass vLLM's own models")
    return 1 if failures or not total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
