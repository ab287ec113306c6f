"""Tiny random-weight models of each family, built from configs with the real classes.

They run on CPU in milliseconds, so the suite and the benchmarks exercise the real loading and forward
code without downloading anything. Their answers are noise; their shapes and code paths are real.
"""

from __future__ import annotations

from typing import Any

import torch

GEMMA_VOCAB = 262144
# The name `serve-model --tiny` serves the random DiffusionGemma under; it reads with the offline Gemma tokenizer.
TINY_SERVED_NAME = "diffjev/tiny-diffusiongemma-random"


def _seeded(seed: int) -> None:
    torch.manual_seed(seed)


def tiny_diffusion_gemma(hidden: int = 64, layers: int = 2, seed: int = 0, vocab_size: int = GEMMA_VOCAB) -> Any:
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion

    _seeded(seed)
    config = DiffusionGemmaConfig(
        text_config={
            "vocab_size": vocab_size,
            "hidden_size": hidden,
            "intermediate_size": 2 * hidden,
            "num_hidden_layers": layers,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "global_head_dim": 32,
            "num_experts": 4,
            "top_k_experts": 2,
            "moe_intermediate_size": hidden // 2,
            "layer_types": (["sliding_attention", "full_attention"] * layers)[:layers],
            "sliding_window": 64,
        },
        vision_config={
            "hidden_size": 32,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "head_dim": 16,
            "intermediate_size": 64,
        },
        canvas_length=16,
    )
    return DiffusionGemmaForBlockDiffusion(config).eval()


def tiny_masked_lm(hidden: int = 64, layers: int = 2, seed: int = 0, vocab_size: int = GEMMA_VOCAB) -> Any:
    from transformers import ModernBertConfig, ModernBertForMaskedLM

    _seeded(seed)
    config = ModernBertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=1,
        cls_token_id=2,
        sep_token_id=1,
    )
    return ModernBertForMaskedLM(config).eval()


def tiny_causal_lm(hidden: int = 64, layers: int = 2, seed: int = 0, vocab_size: int = GEMMA_VOCAB) -> Any:
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    _seeded(seed)
    config = Gemma3TextConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
        sliding_window=64,
        layer_types=(["sliding_attention", "full_attention"] * layers)[:layers],
    )
    return Gemma3ForCausalLM(config).eval()
