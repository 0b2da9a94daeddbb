"""vLLM KV-cache size for a model: how much memory one served token costs.

Sizing ``--kv-cache-memory-bytes`` (and knowing what a co-resident vLLM leaves
for training) needs bytes per token, and that differs per layer on hybrid
models: Gemma's sliding layers keep at most ``sliding_window`` tokens once
vLLM's hybrid KV manager is on, so at long context only the global layers grow.
"""

from __future__ import annotations

from .models import Architecture, Layer

KV_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4, "fp8": 1}


def layer_kv_bytes_per_token(layer: Layer, dtype_bytes: int) -> int:
    """2 (K and V) x kv_heads x head_dim x dtype bytes.

    K and V are both counted even where the model reuses its key projection as
    the value (Gemma 4 global layers): the cache layout still holds two tensors.
    """
    a = layer.attention
    return 2 * a.kv_heads * a.head_dim * dtype_bytes


def kv_cache_bytes(model: Architecture, tokens: int, dtype_bytes: int = 2) -> int:
    """KV bytes for one sequence of ``tokens`` tokens: sliding layers capped at their window."""
    total = 0
    for layer in model.layers:
        window = layer.attention.sliding_window
        held = min(tokens, window) if window else tokens
        total += layer_kv_bytes_per_token(layer, dtype_bytes) * held
    return total


def kv_bytes_per_token(model: Architecture, dtype_bytes: int = 2, context: int | None = None) -> float:
    """Average KV bytes per token of a ``context``-token sequence (all layers uncapped if None)."""
    if context is None:
        return float(sum(layer_kv_bytes_per_token(layer, dtype_bytes) for layer in model.layers))
    return kv_cache_bytes(model, context, dtype_bytes) / context
