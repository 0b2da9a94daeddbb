"""Training-memory estimator: will this fine-tune fit before it takes the node down?

Public API (the planner and ``sparkguard estimate`` use only these):

* :func:`load_model` - a preset name or a Hugging Face config.json path -> :class:`Architecture`
* :class:`TrainingSpec` - method, rank, target, seq_len, micro_batch, dtype, checkpointing, attn, loss
* :func:`estimate_training` - :class:`Estimate` with ``peak_bytes``, ``components``, ``formulas``
* :func:`largest_seq_len` - the longest seq_len that fits a byte budget
* :func:`kv_cache_bytes` / :func:`kv_bytes_per_token` - vLLM KV cache sizing
"""

from .kv import kv_bytes_per_token, kv_cache_bytes
from .models import PRESETS, Architecture, from_hf_config, load_model
from .training import Estimate, TrainingSpec, estimate_training, largest_seq_len

__all__ = [
    "PRESETS", "Architecture", "Estimate", "TrainingSpec", "estimate_training", "from_hf_config",
    "kv_bytes_per_token", "kv_cache_bytes", "largest_seq_len", "load_model",
]
