"""The node budget: does serving + training fit, with earlyoom's line and the OS kept whole?

Per host, in bytes (integers, so every budget adds up exactly)::

    MemTotal = earlyoom SIGTERM line + OS reserve + serving + training + headroom

for each phase the node goes through: ``serving`` (models at full size) and,
when a training job is planned, ``training`` (models as ``vllm.during_training``
leaves them: shrunk to their shared KV size, stopped, or kept). The SIGTERM line
is budgeted as used: memory below it is earlyoom's, and a plan that dips into
it is a plan to have the trainer killed (or, without earlyoom, the node hung).

A host fits when no phase has negative headroom. An over-committed host is a
configuration error for ``validate``, ``render`` and ``apply`` (exit 2) via the
``budget`` role's checks, with the numbers and computed ways out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...errors import DOES_NOT_FIT, Problem

if TYPE_CHECKING:
    from .estimate import Architecture, TrainingSpec

GIB = 2**30
# The default shrunk KV cache: one max_model_len sequence plus this margin, capped at the full KV.
# vLLM refuses to start when the KV cache holds less than one max_model_len sequence, and it
# counts in whole blocks per layer after its own profiling: a cache of exactly one sequence
# fails on rounding. A quarter more keeps the start safe and still frees most of the KV.
SHARED_KV_MARGIN = 1.25


def default_shared_kv(min_kv: int, kv: int | None) -> int:
    """One sequence's KV plus the margin, never more than the full-size KV."""
    margin = math.ceil(min_kv * SHARED_KV_MARGIN)
    return margin if kv is None else min(kv, margin)

# What CUDA reports as total device memory (cudaMemGetInfo's total, torch.cuda.mem_get_info()[1]) per
# device profile: the base of vLLM's --gpu-memory-utilization. The one place this table lives.
# dgx-spark: ~119.6 GiB of the 121.7 GiB MemTotal (GB10, DGX OS 7, driver 580; the figure,
# not measured here). Other unified classes vary by SKU (GH200 96/144 GB HBM, Jetson Orin/Thor 32-128 GB,
# Strix Halo per BIOS carve-out): declare vllm.cuda_total_gib for them.
CUDA_TOTAL_GIB: dict[str, float] = {
    "dgx-spark": 119.6,
}


def gib_bytes(value: float) -> int:
    """GiB from the inventory -> bytes, rounded like node.memory_total_gib is."""
    return int(round(value * GIB))


def fmt_gib(value: int) -> str:
    return f"{value / GIB:.2f} GiB"


@dataclass(frozen=True)
class ServingPlan:
    name: str
    model: str
    weights_bytes: int
    kv_cache_memory_bytes: int
    overhead_bytes: int
    gpu_memory_utilization: float
    explicit_kv: bool  # False: legacy utilization-only sizing (vLLM fills the fraction with KV)
    max_model_len: int
    max_num_seqs: int
    min_kv_bytes: int | None  # KV of one max_model_len sequence (vLLM refuses to start below it)
    shared_kv_cache_memory_bytes: int | None = None
    shared_gpu_memory_utilization: float | None = None
    weights_source: str = "declared"
    kv_source: str = "declared"
    fp8_weights_bytes: int | None = None  # what weights_dtype fp8 would take (a way out)

    @property
    def footprint_bytes(self) -> int:
        return self.weights_bytes + self.kv_cache_memory_bytes + self.overhead_bytes

    @property
    def shared_footprint_bytes(self) -> int | None:
        if self.shared_kv_cache_memory_bytes is None:
            return None
        return self.weights_bytes + self.shared_kv_cache_memory_bytes + self.overhead_bytes

    def during_training_bytes(self, policy: str) -> int:
        if policy == "stop":
            return 0
        if policy == "shrink" and self.shared_footprint_bytes is not None:
            return self.shared_footprint_bytes
        return self.footprint_bytes

    def to_dict(self, policy: str) -> dict[str, Any]:
        return {
            "name": self.name,
            "model": self.model,
            "weights_bytes": self.weights_bytes,
            "weights_source": self.weights_source,
            "kv_cache_memory_bytes": self.kv_cache_memory_bytes,
            "kv_source": self.kv_source,
            "overhead_bytes": self.overhead_bytes,
            "footprint_bytes": self.footprint_bytes,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "kv_cache_memory_bytes_explicit": self.explicit_kv,
            "max_model_len": self.max_model_len,
            "max_num_seqs": self.max_num_seqs,
            "shared": None if self.shared_kv_cache_memory_bytes is None else {
                "kv_cache_memory_bytes": self.shared_kv_cache_memory_bytes,
                "footprint_bytes": self.shared_footprint_bytes,
                "gpu_memory_utilization": self.shared_gpu_memory_utilization,
            },
            "during_training_bytes": self.during_training_bytes(policy),
        }


@dataclass(frozen=True)
class TrainingPlan:
    name: str
    source: str  # "declared" or "estimated"
    peak_bytes: int  # what the budget counts: declared peak, or estimate + cpu overhead
    estimate_bytes: int | None = None
    cpu_overhead_bytes: int = 0
    spec: TrainingSpec | None = None  # when estimated
    components: dict[str, int] = field(default_factory=dict)
    phase: str | None = None

    def describe(self) -> str:
        if self.spec is None:
            return f"'{self.name}', declared peak"
        s = self.spec
        method = s.method + (f" r{s.rank}" if s.method != "full" else "")
        return (f"'{self.name}': {s.model.name} {method}, seq_len {s.seq_len:,} x batch {s.micro_batch},"
                f" checkpointing {'on' if s.gradient_checkpointing else 'off'}, loss {s.loss}, estimated")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "source": self.source, "peak_bytes": self.peak_bytes}
        if self.spec is not None:
            out.update({
                "estimate_bytes": self.estimate_bytes,
                "cpu_overhead_bytes": self.cpu_overhead_bytes,
                "phase": self.phase,
                "components": dict(self.components),
                "spec": self.spec.inputs(),
            })
        return out


@dataclass(frozen=True)
class Phase:
    name: str  # "serving" or "training"
    serving_bytes: int
    training_bytes: int
    used_bytes: int
    headroom_bytes: int


@dataclass
class HostPlan:
    host: str
    device_profile: str
    memory_total_bytes: int | None
    cuda_total_bytes: int | None = None
    term_percent: float = 0.0
    kill_percent: float = 0.0
    earlyoom_enabled: bool = True
    term_bytes: int = 0
    kill_bytes: int = 0
    os_reserve_bytes: int = 0
    during_training: str = "shrink"
    serving: list[ServingPlan] = field(default_factory=list)
    training: TrainingPlan | None = None
    phases: list[Phase] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)  # input problems (not over-commit)
    ways_out: list[str] = field(default_factory=list)

    @property
    def headroom_bytes(self) -> int | None:
        return min((p.headroom_bytes for p in self.phases), default=None)

    @property
    def fits(self) -> bool | None:
        if not self.phases:
            return None
        return all(p.headroom_bytes >= 0 for p in self.phases)

    def phase(self, name: str) -> Phase | None:
        return next((p for p in self.phases if p.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "device_profile": self.device_profile,
            "memory_total_bytes": self.memory_total_bytes,
            "cuda_total_bytes": self.cuda_total_bytes,
            "earlyoom": {
                "enabled": self.earlyoom_enabled,
                "term_percent": self.term_percent, "term_bytes": self.term_bytes,
                "kill_percent": self.kill_percent, "kill_bytes": self.kill_bytes,
            },
            "os_reserve_bytes": self.os_reserve_bytes,
            "during_training": self.during_training,
            "serving": [s.to_dict(self.during_training) for s in self.serving],
            "training": self.training.to_dict() if self.training else None,
            "phases": [
                {"name": p.name, "serving_bytes": p.serving_bytes, "training_bytes": p.training_bytes,
                 "used_bytes": p.used_bytes, "headroom_bytes": p.headroom_bytes}
                for p in self.phases
            ],
            "headroom_bytes": self.headroom_bytes,
            "fits": self.fits,
            "ways_out": list(self.ways_out),
        }


# --- the arithmetic a plan is built with (roles/budget/plan.py reads the settings) ------------


def utilization_step(footprint: int, cuda_total: int) -> float:
    """The smallest 0.01 step that covers ``footprint`` (vLLM's startup check), as an exact decimal."""
    hundredths = -(-footprint * 100 // cuda_total)  # ceil without floats
    return min(hundredths, 100) / 100


def model_shape(spec: str | None) -> Architecture | None:
    if spec is None:
        return None
    from .estimate import load_model

    return load_model(spec)


def weights_bytes(arch: Architecture, dtype: str) -> int:
    params = arch.params
    if dtype == "fp8":
        linear = arch.linear_params
        return linear + (params - linear) * 2
    return params * 2


# --- what would make it fit ------------------------------------------------------------


def ways_out(plan: HostPlan) -> list[str]:
    """Concrete, computed changes that make the worst phase fit (each alone, unless it says otherwise)."""
    out: list[str] = []
    total = plan.memory_total_bytes or 0
    fixed = plan.term_bytes + plan.os_reserve_bytes
    serving_phase, training_phase = plan.phase("serving"), plan.phase("training")

    if serving_phase and serving_phase.headroom_bytes < 0:
        deficit = -serving_phase.headroom_bytes
        out.extend(_serving_cuts(plan, deficit, during_training=False))
        out.append(f"serve fewer models on this host: serving alone needs {fmt_gib(deficit)} more than the "
                   f"{fmt_gib(total - fixed)} left after the SIGTERM line and the OS reserve")
        return out

    if training_phase is None or training_phase.headroom_bytes >= 0:
        return out
    deficit = -training_phase.headroom_bytes
    training = plan.training
    assert training is not None
    rooms = [("as configured", total - fixed - training_phase.serving_bytes)]
    if plan.serving and plan.during_training != "stop":
        def smallest(s: ServingPlan) -> int:
            if s.min_kv_bytes is not None:
                return default_shared_kv(s.min_kv_bytes, s.kv_cache_memory_bytes)
            return s.shared_kv_cache_memory_bytes or s.kv_cache_memory_bytes

        shrunk = sum(s.weights_bytes + smallest(s) + s.overhead_bytes for s in plan.serving)
        if shrunk < training_phase.serving_bytes:
            sizes = ", ".join(f"{s.name} {fmt_gib(smallest(s))}" for s in plan.serving if s.min_kv_bytes)
            rooms.append((f"with vllm.during_training: shrink to one max_model_len sequence of KV + 25% "
                          f"(shared_kv_cache_gib: {sizes})", total - fixed - shrunk))
        rooms.append(("without co-location (vllm.during_training: stop, or train on another node)", total - fixed))
    for label, room in rooms:
        out.append(_training_fit(training, room, label, deficit if label == "as configured" else None))
    out.extend(_serving_cuts(plan, deficit, during_training=True))
    if not plan.serving:
        out.append("train on a node with more memory")
    return out


def _training_fit(training: TrainingPlan, room: int, label: str, deficit: int | None) -> str:
    """What the job may be, given ``room`` bytes for it."""
    from .estimate import largest_seq_len

    if training.spec is None:
        if deficit is not None:
            return (f"{label}: lower the job's peak by {fmt_gib(deficit)} to {fmt_gib(room)} (declare the job spec "
                    f"under budget.training instead of peak_gib to have sparkguard compute the seq_len)")
        return f"{label}: {fmt_gib(room)} for the job" + (" - enough" if room >= training.peak_bytes else
                                                          f" - still {fmt_gib(training.peak_bytes - room)} short")
    budget = room - training.cpu_overhead_bytes
    spec = training.spec
    n = largest_seq_len(spec, budget) if budget > 0 else 0
    text = (f"{label}: {fmt_gib(room)} left for training, " + (
        f"budget.training.seq_len {spec.seq_len:,} -> at most {n:,}" if n else "no seq_len fits"))
    if spec.loss == "standard":
        chunked = largest_seq_len(spec.with_(loss="chunked"), budget) if budget > 0 else 0
        if chunked:
            text += f" ({chunked:,} with budget.training.loss: chunked, a fused linear cross-entropy)"
    return text


def _serving_cuts(plan: HostPlan, deficit: int, during_training: bool) -> list[str]:
    out: list[str] = []
    policy = plan.during_training if during_training else "keep"
    if during_training and plan.during_training == "stop":
        return out
    # Smaller KV: down to one max_model_len sequence per model.
    reducible = 0
    for s in plan.serving:
        kv = s.kv_cache_memory_bytes
        if policy == "shrink" and s.shared_kv_cache_memory_bytes is not None:
            kv = s.shared_kv_cache_memory_bytes
        reducible += max(0, kv - (s.min_kv_bytes or 0))
    if during_training and plan.during_training == "keep":
        pass  # shrinking is offered by ways_out() with the seq_len it allows
    elif reducible:
        which = "shared_kv_cache_gib" if policy == "shrink" else "kv_cache_gib"
        out.append(f"smaller KV: lower vllm.models.*.{which} by {fmt_gib(deficit)} in total (up to "
                   f"{fmt_gib(reducible)} can go before a max_model_len sequence no longer fits"
                   + ("" if reducible >= deficit else "; not enough alone") + ")")
    legacy = [s.name for s in plan.serving if not s.explicit_kv]
    if legacy:
        out.append(f"size the KV explicitly: gpu_memory_utilization alone makes vLLM fill "
                   f"{', '.join(legacy)} with KV up to the fraction of the whole node; set kv_cache_gib "
                   f"and drop gpu_memory_utilization")
    fp8 = sum(s.weights_bytes - s.fp8_weights_bytes for s in plan.serving if s.fp8_weights_bytes is not None)
    if fp8:
        out.append(f"quantized serving: weights_dtype: fp8 saves {fmt_gib(fp8)}"
                   + (" - enough" if fp8 >= deficit else " - not enough alone")
                   + "; kv_cache_dtype: fp8 halves the KV")
    return out


def budget_problems(plan: HostPlan) -> list[Problem]:
    """The over-commit as a configuration problem, with the numbers and the ways out."""
    if plan.fits is not False:
        return []
    worst = min(plan.phases, key=lambda p: p.headroom_bytes)
    total = plan.memory_total_bytes or 0
    parts = [f"earlyoom SIGTERM line {fmt_gib(plan.term_bytes)} ({plan.term_percent:g}%)",
             f"OS reserve {fmt_gib(plan.os_reserve_bytes)}"]
    policy = plan.during_training if worst.name == "training" else "keep"
    for s in plan.serving:
        size = s.during_training_bytes(policy)
        how = {"stop": "stopped", "shrink": "shrunk"}.get(policy, "full")
        if worst.name == "serving":
            how = "full"
        parts.append(f"vLLM '{s.name}' {fmt_gib(size)} ({how}: weights {fmt_gib(s.weights_bytes)} + KV "
                     f"{fmt_gib(size - s.weights_bytes - s.overhead_bytes) if size else fmt_gib(0)} + runtime "
                     f"{fmt_gib(s.overhead_bytes if size else 0)}, gpu_memory_utilization "
                     f"{s.gpu_memory_utilization if how != 'shrunk' else s.shared_gpu_memory_utilization})")
    if worst.name == "training" and plan.training:
        parts.append(f"training {fmt_gib(plan.training.peak_bytes)} ({plan.training.describe()})")
    when = "while the training job runs" if worst.name == "training" else "with serving alone"
    message = (
        f"over-committed {when}: {' + '.join(parts)} = {fmt_gib(worst.used_bytes)}, but MemTotal is "
        f"{fmt_gib(total)}: {fmt_gib(-worst.headroom_bytes)} short. The job would push MemAvailable through "
        f"earlyoom's SIGTERM line (or, without earlyoom, hang the node). Ways out: "
        + "; ".join(f"({i}) {w}" for i, w in enumerate(plan.ways_out, 1)) + "."
    )
    value: int | float | list[str]  # what the Problem shows: the knob to turn
    if worst.name == "training" and plan.training:
        spec = plan.training.spec
        field_, value = (("budget.training.seq_len", spec.seq_len) if spec is not None
                         else ("budget.training.peak_gib", round(plan.training.peak_bytes / GIB, 2)))
    else:
        field_, value = "vllm.models", sorted(s.name for s in plan.serving)
    return [Problem("", field_, value, message, kind=DOES_NOT_FIT)]


def plan_document(plans: list[HostPlan]) -> dict[str, Any]:
    return {"schema": 1, "hosts": [p.to_dict() for p in plans]}
