"""Model architectures, as far as training memory cares about them.

The estimator needs shapes, not weights: how many parameters sit in which
linear layers (for weights, LoRA adapters and optimizer state), the attention
geometry of every layer (for saved Q/K/V and score matrices), the MoE routing
(tokens pass through top-k experts, not all of them) and the vocabulary (the
logits dominate long-sequence fine-tunes, see docs/estimator.md).

A model comes from a preset name or from a Hugging Face ``config.json``. The
presets are transcriptions of the published configs so that the planner works
offline, on a node that has never downloaded the model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ....errors import ConfigError, Problem
from ....inventory import operator_files


@dataclass(frozen=True)
class Attention:
    """One layer's attention geometry.

    Gemma 4 uses two of these: sliding layers (8 kv heads of 256) and global
    layers (2 kv heads of 512, keys reused as values). The head_dim matters
    beyond size: FlashAttention-2 only handles head_dim <= 256.
    """

    heads: int
    kv_heads: int
    head_dim: int
    sliding_window: int | None = None  # None: the layer attends to the whole sequence
    k_eq_v: bool = False  # the key projection doubles as the value projection (no v_proj)


@dataclass(frozen=True)
class MoE:
    """A routed expert block: each token runs through ``top_k`` of ``experts`` gated MLPs."""

    experts: int
    top_k: int
    intermediate: int


@dataclass(frozen=True)
class Layer:
    """One decoder layer. Gemma 4 26B-A4B has BOTH a dense MLP and an MoE block per layer."""

    attention: Attention
    mlp_intermediate: int  # dense gated MLP width; 0 when the layer has none
    moe: MoE | None = None


@dataclass(frozen=True)
class Linear:
    """A linear projection: LoRA adapts these, QLoRA quantizes them.

    ``count`` is how many copies exist (one per expert for expert MLPs);
    ``token_share`` is the fraction of the tokens each copy sees (top_k/experts).
    """

    name: str
    d_in: int
    d_out: int
    count: int = 1
    token_share: float = 1.0

    @property
    def params(self) -> int:
        return self.d_in * self.d_out * self.count


@dataclass(frozen=True)
class Architecture:
    """Everything the estimator reads about a model."""

    name: str
    hidden: int
    vocab: int
    layers: tuple[Layer, ...]
    tied_embeddings: bool = True
    final_logit_softcap: float | None = None
    attn_logit_softcap: float | None = None
    norms_per_layer: int = 2  # RMSNorms per decoder layer (Gemma's sandwich norms: 4, Gemma 4 MoE: 7)
    qk_norm: bool = False  # RMSNorm on each query and key head (Gemma 3/4, Qwen3)
    max_positions: int | None = None
    source: str = ""

    def linears(self, layer: Layer) -> tuple[Linear, ...]:
        """The linear projections of one layer, in the names PEFT and HF use."""
        a, h = layer.attention, self.hidden
        out = [
            Linear("q_proj", h, a.heads * a.head_dim),
            Linear("k_proj", h, a.kv_heads * a.head_dim),
        ]
        if not a.k_eq_v:
            out.append(Linear("v_proj", h, a.kv_heads * a.head_dim))
        out.append(Linear("o_proj", a.heads * a.head_dim, h))
        if layer.mlp_intermediate:
            i = layer.mlp_intermediate
            out += [Linear("gate_proj", h, i), Linear("up_proj", h, i), Linear("down_proj", i, h)]
        if layer.moe:
            m = layer.moe
            share = m.top_k / m.experts
            out += [
                Linear("router", h, m.experts),
                Linear("experts.gate_proj", h, m.intermediate, m.experts, share),
                Linear("experts.up_proj", h, m.intermediate, m.experts, share),
                Linear("experts.down_proj", m.intermediate, h, m.experts, share),
            ]
        return tuple(out)

    @property
    def embedding_params(self) -> int:
        """Input embedding plus, when untied, the separate lm_head."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    @property
    def linear_params(self) -> int:
        return sum(lin.params for layer in self.layers for lin in self.linears(layer))

    @property
    def norm_params(self) -> int:
        per_layer = self.norms_per_layer * self.hidden
        qk = sum(2 * layer.attention.head_dim for layer in self.layers) if self.qk_norm else 0
        return len(self.layers) * per_layer + qk + self.hidden  # + the final norm

    @property
    def params(self) -> int:
        return self.embedding_params + self.linear_params + self.norm_params


# --- presets -----------------------------------------------------------------
# Transcribed from each model's published Hugging Face config.json (text part).


def _pattern(count: int, every: int) -> tuple[bool, ...]:
    """Gemma's interleave: every ``every``-th layer is global, the rest slide (True = sliding)."""
    return tuple(bool((i + 1) % every) for i in range(count))


def _gemma4_26b_a4b() -> Architecture:
    # google/gemma-4-26B-A4B-it config.json, text_config: hidden_size 2816, num_hidden_layers 30,
    # layer_types 5 sliding : 1 full, num_attention_heads 16, num_key_value_heads 8, head_dim 256,
    # num_global_key_value_heads 2, global_head_dim 512, attention_k_eq_v true, intermediate_size 2112,
    # enable_moe_block true, num_experts 128, top_k_experts 8, moe_intermediate_size 704,
    # vocab_size 262144, sliding_window 1024, final_logit_softcapping 30.0, tie_word_embeddings true,
    # max_position_embeddings 262144.
    sliding = Attention(16, 8, 256, sliding_window=1024)
    full = Attention(16, 2, 512, k_eq_v=True)
    moe = MoE(128, 8, 704)
    layers = tuple(Layer(sliding if s else full, 2112, moe) for s in _pattern(30, 6))
    return Architecture(
        "gemma-4-26B-A4B", 2816, 262144, layers, tied_embeddings=True, final_logit_softcap=30.0,
        norms_per_layer=7, qk_norm=True, max_positions=262144, source="preset (google/gemma-4-26B-A4B-it)",
    )


def _gemma3_27b() -> Architecture:
    # google/gemma-3-27b-it config.json, text_config: hidden_size 5376, num_hidden_layers 62,
    # num_attention_heads 32, num_key_value_heads 16, head_dim 128, intermediate_size 21504,
    # sliding_window 1024, sliding_window_pattern 6, vocab_size 262208, final_logit_softcapping null,
    # attn_logit_softcapping null, max_position_embeddings 131072, tied embeddings.
    sliding, full = Attention(32, 16, 128, sliding_window=1024), Attention(32, 16, 128)
    layers = tuple(Layer(sliding if s else full, 21504) for s in _pattern(62, 6))
    return Architecture(
        "gemma-3-27B", 5376, 262208, layers, tied_embeddings=True, norms_per_layer=4, qk_norm=True,
        max_positions=131072, source="preset (google/gemma-3-27b-it)",
    )


def _qwen3_30b_a3b() -> Architecture:
    # Qwen/Qwen3-30B-A3B config.json: hidden_size 2048, num_hidden_layers 48, num_attention_heads 32,
    # num_key_value_heads 4, head_dim 128, num_experts 128, num_experts_per_tok 8,
    # moe_intermediate_size 768, decoder_sparse_step 1, mlp_only_layers [], vocab_size 151936,
    # tie_word_embeddings false, use_sliding_window false, max_position_embeddings 40960.
    layer = Layer(Attention(32, 4, 128), 0, MoE(128, 8, 768))
    return Architecture(
        "Qwen3-30B-A3B", 2048, 151936, (layer,) * 48, tied_embeddings=False, qk_norm=True,
        max_positions=40960, source="preset (Qwen/Qwen3-30B-A3B)",
    )


def _llama31_8b() -> Architecture:
    # meta-llama/Llama-3.1-8B config.json: hidden_size 4096, num_hidden_layers 32,
    # num_attention_heads 32, num_key_value_heads 8, head_dim 128 (4096/32), intermediate_size 14336,
    # vocab_size 128256, tie_word_embeddings false, max_position_embeddings 131072.
    layer = Layer(Attention(32, 8, 128), 14336)
    return Architecture(
        "Llama-3.1-8B", 4096, 128256, (layer,) * 32, tied_embeddings=False, max_positions=131072,
        source="preset (meta-llama/Llama-3.1-8B)",
    )


PRESETS = {
    "gemma-4-26B-A4B": _gemma4_26b_a4b,
    "gemma-3-27B": _gemma3_27b,
    "Qwen3-30B-A3B": _qwen3_30b_a3b,
    "Llama-3.1-8B": _llama31_8b,
}


# --- Hugging Face config.json ------------------------------------------------


def _field(text: dict[str, Any], *names: str, default: Any = None) -> Any:
    """The first of several spellings a config family uses for the same thing."""
    for name in names:
        if text.get(name) is not None:
            return text[name]
    return default


def _sliding_flags(text: dict[str, Any], count: int) -> tuple[bool, ...]:
    """Which layers slide. Explicit ``layer_types`` wins; otherwise each family's default."""
    types = text.get("layer_types")
    if types:
        return tuple(t == "sliding_attention" for t in types[:count])
    window = text.get("sliding_window")
    model_type = str(text.get("model_type", ""))
    if not window:
        return (False,) * count
    if text.get("sliding_window_pattern"):
        return _pattern(count, int(text["sliding_window_pattern"]))
    if model_type.startswith(("gemma3", "gemma4")):
        return _pattern(count, 6)
    if model_type.startswith("gemma2"):
        return _pattern(count, 2)
    if text.get("use_sliding_window") is False:
        return (False,) * count
    return (True,) * count  # Mistral-style: every layer slides


def _moe(text: dict[str, Any]) -> MoE | None:
    experts = _field(text, "num_experts", "num_local_experts", "n_routed_experts")
    if not experts or text.get("enable_moe_block") is False:
        return None
    top_k = _field(text, "top_k_experts", "num_experts_per_tok")
    width = _field(text, "moe_intermediate_size", "intermediate_size")
    return MoE(int(experts), int(top_k), int(width))


def from_hf_config(config: dict[str, Any], name: str = "config.json") -> Architecture:
    """Build an :class:`Architecture` from a parsed HF ``config.json``.

    Multimodal checkpoints (Gemma 3/4) keep the language model under
    ``text_config``; the vision tower is not counted (it is small and usually
    frozen). Raises KeyError for a config that lacks the basic shape fields.
    """
    text = {**config, **config["text_config"]} if isinstance(config.get("text_config"), dict) else config
    hidden, count = int(text["hidden_size"]), int(text["num_hidden_layers"])
    heads = int(text["num_attention_heads"])
    kv_heads = int(_field(text, "num_key_value_heads", default=heads))
    head_dim = int(_field(text, "head_dim", default=hidden // heads))
    window = text.get("sliding_window")
    k_eq_v = bool(text.get("attention_k_eq_v", False))
    sliding = Attention(heads, kv_heads, head_dim, sliding_window=int(window) if window else None)
    full = Attention(
        heads,
        int(_field(text, "num_global_key_value_heads", default=kv_heads)),
        int(_field(text, "global_head_dim", default=head_dim)),
        k_eq_v=k_eq_v,
    )
    moe = _moe(text)
    model_type = str(text.get("model_type", ""))
    dense_only = set(text.get("mlp_only_layers") or [])
    has_dense = moe is None or text.get("enable_moe_block") is True  # Gemma 4 runs both
    dense_width = int(_field(text, "intermediate_size", default=0)) if has_dense else 0
    layers = tuple(
        Layer(
            sliding if slides else full,
            int(text.get("intermediate_size", 0)) if i in dense_only else dense_width,
            None if i in dense_only else moe,
        )
        for i, slides in enumerate(_sliding_flags(text, count))
    )
    gemma = model_type.startswith(("gemma2", "gemma3", "gemma4"))
    norms = (4 if gemma else 2) + (3 if gemma and moe else 0)
    tied = config.get("tie_word_embeddings", text.get("tie_word_embeddings", True))
    return Architecture(
        name=str(config.get("_name_or_path") or name),
        hidden=hidden,
        vocab=int(text["vocab_size"]),
        layers=layers,
        tied_embeddings=bool(tied),
        final_logit_softcap=text.get("final_logit_softcapping"),
        attn_logit_softcap=text.get("attn_logit_softcapping"),
        norms_per_layer=norms,
        qk_norm=model_type.startswith(("gemma3", "gemma4", "qwen3")),
        max_positions=text.get("max_position_embeddings"),
        source=name,
    )


def load_model(spec: str) -> Architecture:
    """A preset name, or a path to a config.json (or to the directory holding one)."""
    if spec in PRESETS:
        return PRESETS[spec]()
    allowed = f"a preset ({', '.join(PRESETS)}) or the path of a Hugging Face config.json"

    def refused(why: str) -> ConfigError:
        return ConfigError([Problem(host="", field="--model", value=spec, allowed=f"{why}; use {allowed}")])

    # Read through the one reader of operator-side files (a regular file, no /proc, /sys or /dev, at most
    # 1 MiB); no message quotes what the file holds.
    path = Path(spec).expanduser().absolute()
    try:
        if path.is_dir():
            path = path / "config.json"
        data = operator_files.read_checked(path, "json")
    except operator_files.Refused as refusal:
        raise refused(f"the file {path} {refusal.reason}") from None
    if data is None:
        raise refused("unknown model (no readable file there)")
    try:
        return from_hf_config(json.loads(data), name=str(path))
    except json.JSONDecodeError as error:
        raise refused(f"cannot read a model shape from {path}: not JSON (line {error.lineno}, column {error.colno})") \
            from None
    except KeyError as error:
        raise refused(f"cannot read a model shape from {path}: it has no {error} key") from None
    except (ValueError, TypeError, AttributeError, ArithmeticError, RecursionError) as error:
        raise refused(f"cannot read a model shape from {path}: a value of the wrong type or range"
                      f" ({type(error).__name__})") from None
