"""Peak memory of one fine-tuning step, from first principles.

Why this exists: on a unified-memory node the trainer's CUDA allocations are
host RAM that no cgroup sees, so the only defence that does not kill something
is to know the peak before starting. The incident's LoRA run needed ~80 GB at
8k tokens and >110 GB at 16k on a 121 GiB machine that vLLM already shared.

Every term is a count of tensors that autograd keeps alive at the moment of the
peak, each with its formula (docs/estimator.md explains each one). Two moments
compete for the peak:

* the loss backward: all layer checkpoints plus the logits machinery (the
  vocabulary-sized tensors; they dominate long sequences on 262k-vocab models);
* the backward of one layer under gradient checkpointing: checkpoints plus one
  layer's recomputed activations and its attention score matrix.

The logits are freed before the first layer is recomputed and the caching
allocator reuses their blocks, so the peak takes the larger of the two, not
the sum. Without checkpointing everything is alive at the loss backward.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from ....errors import ConfigError, Problem
from .models import Architecture, Layer

GB, GIB, MIB = 10**9, 2**30, 2**20

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
METHODS = ("full", "lora", "qlora")
TARGETS = ("attention", "all-linear")
ATTENTION = ("flash", "sdpa", "eager")
LOSSES = ("standard", "chunked")
ATTENTION_MODULES = frozenset({"q_proj", "k_proj", "v_proj", "o_proj"})

FLASH_MAX_HEAD_DIM = 256  # FlashAttention-2 kernels stop at head_dim 256
ADAM_STATE_BYTES = 8  # exp_avg + exp_avg_sq, fp32
MASTER_WEIGHT_BYTES = 4  # fp32 copy kept by mixed-precision optimizers when training in 16-bit
ADAPTER_BYTES = 4  # PEFT keeps LoRA weights in fp32 (autocast_adapter_dtype=True)
NF4_BYTES = 4.127 / 8  # QLoRA: 4-bit NF4 + double-quantized scales (Dettmers et al. 2023, 4.127 bits)
LOSS_FP32_BYTES = 12  # log-softmax output + its incoming grad + grad of the fp32 logits, 4 bytes each
CUDA_CONTEXT_BYTES = 768 * MIB  # field facts: 0.3-1 GiB; a judgement, not a fit
ALLOCATOR_SLACK = 0.05  # caching-allocator rounding/fragmentation on the non-weight bytes; a judgement


@dataclass(frozen=True)
class TrainingSpec:
    """One training configuration: the inputs of ``sparkguard estimate``."""

    model: Architecture
    method: str = "lora"
    rank: int = 16
    target: str = "attention"
    seq_len: int = 2048
    micro_batch: int = 1
    dtype: str = "bf16"
    gradient_checkpointing: bool = False
    attn: str = "sdpa"
    loss: str = "standard"

    def with_(self, **changes: Any) -> TrainingSpec:
        return replace(self, **changes)

    @property
    def tokens(self) -> int:
        return self.seq_len * self.micro_batch

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    def inputs(self) -> dict[str, Any]:
        out = {k: v for k, v in asdict(self).items() if k != "model"}
        out["model"] = self.model.name
        return out


@dataclass(frozen=True)
class Term:
    """One component of the peak: its bytes and the formula that produced them."""

    bytes: int
    formula: str


@dataclass(frozen=True)
class Estimate:
    spec: TrainingSpec
    terms: dict[str, Term]
    peak_bytes: int
    peak_formula: str
    phase: str  # which moment sets the peak: "loss backward" or "layer recompute"
    notes: tuple[str, ...] = field(default=())

    @property
    def components(self) -> dict[str, int]:
        return {name: term.bytes for name, term in self.terms.items()}

    @property
    def formulas(self) -> dict[str, str]:
        return {name: term.formula for name, term in self.terms.items()}

    def to_dict(self) -> dict[str, Any]:
        model = self.spec.model
        return {
            "peak_bytes": self.peak_bytes,
            "peak_gb": round(self.peak_bytes / GB, 2),
            "peak_gib": round(self.peak_bytes / GIB, 2),
            "peak_formula": self.peak_formula,
            "phase": self.phase,
            "components": self.components,
            "formulas": self.formulas,
            "inputs": self.spec.inputs(),
            "model": {"name": model.name, "params": model.params, "source": model.source},
            "notes": list(self.notes),
        }


# --- validation ---------------------------------------------------------------


def validate(spec: TrainingSpec) -> None:
    """Reject what cannot be estimated, naming the CLI flag, all problems at once."""
    problems = []

    def check(ok: bool, flag: str, value: Any, allowed: str) -> None:
        if not ok:
            problems.append(Problem(host="", field=flag, value=value, allowed=allowed))

    for flag, value, choices in (
        ("--method", spec.method, METHODS), ("--target", spec.target, TARGETS),
        ("--dtype", spec.dtype, tuple(DTYPE_BYTES)), ("--attn", spec.attn, ATTENTION),
        ("--loss", spec.loss, LOSSES),
    ):
        check(value in choices, flag, value, f"one of {', '.join(choices)}")
    for flag, number in (("--rank", spec.rank), ("--seq-len", spec.seq_len), ("--micro-batch", spec.micro_batch)):
        check(isinstance(number, int) and number > 0, flag, number, "a whole number > 0")
    if problems:
        raise ConfigError(problems)


# --- the terms -----------------------------------------------------------------


def _gb(n: float) -> str:
    return f"{n / GB:.2f} GB"


def adapter_params(spec: TrainingSpec) -> int:
    """LoRA adds r x (d_in + d_out) per adapted matrix (A: d_in x r, B: r x d_out)."""
    wanted = ATTENTION_MODULES if spec.target == "attention" else None
    return sum(
        spec.rank * (lin.d_in + lin.d_out) * lin.count
        for layer in spec.model.layers
        for lin in spec.model.linears(layer)
        if wanted is None or lin.name in wanted
    )


def weights(spec: TrainingSpec) -> Term:
    m, d = spec.model, spec.dtype_bytes
    if spec.method != "qlora":
        return Term(m.params * d, f"P x D = {m.params:,} x {d}")
    linear = m.linear_params
    largest = max(lin.d_in * lin.d_out for layer in m.layers for lin in m.linears(layer))
    total = math.ceil(linear * NF4_BYTES) + (m.params - linear) * d + largest * d
    return Term(total, (
        f"P_linear x 4.127/8 + (P - P_linear) x D + largest matrix x D (dequant buffer)"
        f" = {linear:,} x 0.516 + {m.params - linear:,} x {d} + {largest:,} x {d}"
    ))


def trainable_state(spec: TrainingSpec) -> Term:
    d = spec.dtype_bytes
    if spec.method == "full":
        master = MASTER_WEIGHT_BYTES if d < 4 else 0
        per = d + master + ADAM_STATE_BYTES
        return Term(spec.model.params * per, (
            f"P x (grad D + fp32 master {master} + Adam 8) = {spec.model.params:,} x {per}"
        ))
    n = adapter_params(spec)
    per = 2 * ADAPTER_BYTES + ADAM_STATE_BYTES  # fp32 weight + fp32 grad + Adam 8 = 16
    return Term(n * per, (
        f"LoRA params x (fp32 weight 4 + grad 4 + Adam 8); LoRA params = sum r x (d_in + d_out)"
        f" over {spec.target} matrices = {n:,} x {per}"
    ))


def layer_activations(spec: TrainingSpec, layer: Layer) -> int:
    """Bytes one layer's forward saves for backward, score matrix excluded (Korthikanti-style count).

    Without dropout. Norms upcast to fp32 (HF RMSNorm), LoRA casts each adapted
    module's input to fp32 and saves it for the adapter's weight gradient.
    """
    m, t, d, h = spec.model, spec.tokens, spec.dtype_bytes, spec.model.hidden
    a = layer.attention
    kv_tensors = 1 if a.k_eq_v else 2
    per_token = 4 * m.norms_per_layer * h  # fp32 norm inputs
    per_token += d * (h + (a.heads + kv_tensors * a.kv_heads) * a.head_dim + a.heads * a.head_dim)
    per_token += 4 * a.heads  # softmax statistics (logsumexp) the fused kernels keep
    if m.qk_norm:
        per_token += 4 * (a.heads + a.kv_heads) * a.head_dim
    if layer.mlp_intermediate:
        per_token += d * (h + 4 * layer.mlp_intermediate)  # input, gate, up, act(gate), gate*up
    if layer.moe:
        e = layer.moe
        per_token += 4 * e.experts + d * e.top_k * (2 * h + 4 * e.intermediate)  # router; per routed copy
    total = t * per_token
    if spec.method != "full":
        wanted = ATTENTION_MODULES if spec.target == "attention" else None
        for lin in m.linears(layer):
            if wanted is None or lin.name in wanted:
                total += math.ceil(t * lin.token_share * lin.count) * ADAPTER_BYTES * (lin.d_in + spec.rank)
    return total


ACTIVATION_FORMULA = (
    "T x [4*n_norm*h + D*(h + (a + 2kv)*d + a*d) + 4*(a + kv)*d (qk-norm) + D*(h + 4I) (dense MLP)"
    " + D*k*(2h + 4I_moe) (routed experts)] + LoRA 4*T*(d_in + r) per adapted matrix"
)


def _fused(spec: TrainingSpec, layer: Layer) -> bool:
    """True when the attention kernel never builds the s x s matrix."""
    return spec.attn == "flash" and layer.attention.head_dim <= FLASH_MAX_HEAD_DIM


def _score_bytes(spec: TrainingSpec, layer: Layer) -> tuple[int, int]:
    """(saved, transient) bytes of one layer's score matrix; (0, 0) when fused.

    Saved: the probabilities the P@V backward needs (D), plus the tanh output
    when attention logits are soft-capped. Transient: the raw scores (D), plus
    the fp32 softmax that HF's eager path computes before casting back.
    """
    if _fused(spec, layer):
        return 0, 0
    d = spec.dtype_bytes
    elements = spec.micro_batch * layer.attention.heads * spec.seq_len**2
    saved = d + (d if spec.model.attn_logit_softcap else 0)
    transient = d + (4 if spec.attn == "eager" else 0)
    return elements * saved, elements * transient


def attention_scores(spec: TrainingSpec) -> Term:
    layers = spec.model.layers
    pairs = [_score_bytes(spec, layer) for layer in layers]
    unfused = sum(1 for layer in layers if not _fused(spec, layer))
    per_el = "D (probs)" + (" + 4 (fp32 softmax)" if spec.attn == "eager" else "") + " + D (raw scores)"
    if spec.gradient_checkpointing:
        total = max(s + t for s, t in pairs)
        return Term(total, f"one layer rebuilt: b x a x s^2 x [{per_el}]; {unfused} layer(s) unfused")
    total = sum(s for s, _ in pairs) + max(t for _, t in pairs)
    return Term(total, f"every unfused layer keeps b x a x s^2 x D (probs), + one layer's transient; {unfused} unfused")


def activations(spec: TrainingSpec) -> Term:
    m, t, d = spec.model, spec.tokens, spec.dtype_bytes
    n = len(m.layers)
    if spec.gradient_checkpointing:
        return Term((n + 1) * t * m.hidden * d, f"(L + 1) x T x h x D = {n + 1} x {t:,} x {m.hidden} x {d}")
    total = sum(layer_activations(spec, layer) for layer in m.layers) + t * m.hidden * d
    return Term(total, f"sum over {n} layers of {ACTIVATION_FORMULA}; + T x h x D final hidden")


def recompute(spec: TrainingSpec) -> Term:
    if not spec.gradient_checkpointing:
        return Term(0, "no gradient checkpointing: nothing is recomputed")
    return Term(max(layer_activations(spec, layer) for layer in spec.model.layers),
                f"largest single layer: {ACTIVATION_FORMULA}")


def chunk_tokens(spec: TrainingSpec) -> int:
    """Tokens per chunk of a fused linear cross-entropy (Liger's rule).

    Liger sizes chunks so one chunk's logits are about as big as the hidden
    states: next power of two of T / ceil(V / h).
    """
    m = spec.model
    ratio = math.ceil(m.vocab / m.hidden)
    return min(spec.tokens, 1 << max(0, math.ceil(math.log2(math.ceil(spec.tokens / ratio)))))


def logits(spec: TrainingSpec) -> Term:
    """The vocabulary-sized tensors alive in the loss backward.

    Standard HF path, bytes per (token x vocab): log-softmax output (fp32, saved),
    its incoming gradient (fp32, dense from nll_loss), the gradient of the fp32
    logits (fp32) = 12, plus the tanh output a final-logit softcap saves (D).
    """
    m, d = spec.model, spec.dtype_bytes
    per = LOSS_FP32_BYTES + (d if m.final_logit_softcap else 0)
    cap = " + D (softcap tanh)" if m.final_logit_softcap else ""
    if spec.loss == "standard":
        return Term(spec.tokens * m.vocab * per,
                    f"T x V x (12{cap}) = {spec.tokens:,} x {m.vocab:,} x {per}")
    c = chunk_tokens(spec)
    return Term(c * m.vocab * per + spec.tokens * m.hidden * d, (
        f"chunk x V x (12{cap}) + T x h x D (grad of hidden) = {c} x {m.vocab:,} x {per}"
        f" + {spec.tokens:,} x {m.hidden} x {d}"
    ))


# --- the estimate ----------------------------------------------------------------


def _notes(spec: TrainingSpec) -> tuple[str, ...]:
    notes = []
    wide = [layer.attention.head_dim for layer in spec.model.layers if layer.attention.head_dim > FLASH_MAX_HEAD_DIM]
    if spec.attn == "flash" and wide:
        count = len(wide)
        wide = sorted(set(wide))
        notes.append(
            f"FlashAttention-2 supports head_dim <= {FLASH_MAX_HEAD_DIM}: {count} layer(s) with head_dim "
            f"{'/'.join(map(str, wide))} fall back to SDPA and materialize their score matrix."
        )
    if spec.attn == "sdpa":
        notes.append("sdpa is counted as materializing scores (math backend); a fused SDPA backend needs less.")
    if spec.method == "qlora" and any(layer.moe for layer in spec.model.layers):
        notes.append("qlora assumes the expert matrices are quantized too; fused 3-D expert tensors may stay in D.")
    return tuple(notes)


def estimate_training(spec: TrainingSpec) -> Estimate:
    """Peak bytes of one training step, with every component and its formula."""
    validate(spec)
    terms = {
        "weights": weights(spec),
        "trainable_state": trainable_state(spec),
        "activations": activations(spec),
        "recompute": recompute(spec),
        "attention_scores": attention_scores(spec),
        "logits": logits(spec),
    }
    b = {name: term.bytes for name, term in terms.items()}
    if spec.gradient_checkpointing:
        layer_phase = b["recompute"] + b["attention_scores"]
        moment = max(b["logits"], layer_phase)
        phase = "loss backward" if b["logits"] >= layer_phase else "layer recompute"
        shape = "weights + trainable_state + activations + max(logits, recompute + attention_scores) + cuda_overhead"
    else:
        moment = b["attention_scores"] + b["logits"]
        phase = "loss backward"
        shape = "weights + trainable_state + activations + attention_scores + logits + cuda_overhead"
    dynamic = b["trainable_state"] + b["activations"] + moment
    overhead = CUDA_CONTEXT_BYTES + math.ceil(ALLOCATOR_SLACK * dynamic)
    terms["cuda_overhead"] = Term(overhead, (
        f"CUDA context 0.75 GiB + {ALLOCATOR_SLACK:.0%} allocator slack x non-weight peak bytes ({_gb(dynamic)})"
    ))
    peak = b["weights"] + dynamic + overhead
    return Estimate(spec, terms, peak, shape, phase, _notes(spec))


def largest_seq_len(spec: TrainingSpec, budget_bytes: int, upper: int | None = None) -> int:
    """The longest seq_len whose peak fits in ``budget_bytes``; 0 if not even one token fits.

    Binary search: the peak is monotonic in seq_len (tests/unit/test_estimate.py
    checks it). The planner uses this to suggest "shorten seq_len to N".
    """
    validate(spec)
    hi = upper or spec.model.max_positions or 1 << 20
    if estimate_training(spec.with_(seq_len=1)).peak_bytes > budget_bytes:
        return 0
    if estimate_training(spec.with_(seq_len=hi)).peak_bytes <= budget_bytes:
        return hi
    lo = 1  # fits; hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if estimate_training(spec.with_(seq_len=mid)).peak_bytes <= budget_bytes:
            lo = mid
        else:
            hi = mid
    return lo
