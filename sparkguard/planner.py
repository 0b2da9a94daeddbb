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

from .errors import DOES_NOT_FIT, ConfigError, Problem

if TYPE_CHECKING:
    from .estimate import Architecture, TrainingSpec
    from .hostconfig import HostConfig

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


# --- building a plan -------------------------------------------------------------------


def _utilization(footprint: int, cuda_total: int) -> float:
    """The smallest 0.01 step that covers ``footprint`` (vLLM's startup check), as an exact decimal."""
    hundredths = -(-footprint * 100 // cuda_total)  # ceil without floats
    return min(hundredths, 100) / 100


def _shape(spec: str | None) -> Architecture | None:
    if spec is None:
        return None
    from .estimate import load_model

    return load_model(spec)


def _weights_bytes(arch: Architecture, dtype: str) -> int:
    params = arch.params
    if dtype == "fp8":
        linear = arch.linear_params
        return linear + (params - linear) * 2
    return params * 2


def cuda_total_bytes(config: HostConfig) -> int | None:
    declared = config.vllm.cuda_total_gib
    if declared is not None:
        return gib_bytes(declared)
    known = CUDA_TOTAL_GIB.get(config.node.device_profile)
    return gib_bytes(known) if known is not None else None


# The role blocks of a HostConfig are Any to the core (it imports no role): ``m`` is one of
# roles/vllm/settings.py's ServedModel, ``job`` roles/budget/settings.py's TrainingJob.
def _plan_serving(name: str, m: Any, cuda_total: int, policy: str, problems: list[Problem]) -> ServingPlan | None:
    """One vLLM instance (``m``: roles.vllm's ServedModel): weights, KV cache, runtime, and the utilization they mean."""
    from .estimate import kv_cache_bytes

    base = f"vllm.models.{name}"
    try:
        arch = _shape(m.shape)
    except ConfigError as error:
        for p in error.problems:
            problems.append(Problem("", f"{base}.shape", m.shape, p.allowed))
        return None
    kv_dtype_bytes = 1 if m.kv_cache_dtype == "fp8" else 2
    min_kv = kv_cache_bytes(arch, m.max_model_len, kv_dtype_bytes) if arch else None
    fp8_weights = _weights_bytes(arch, "fp8") if arch else None
    weighed = _serving_weights(m, arch, base, problems)
    if weighed is None:
        return None
    weights, weights_source = weighed
    overhead = gib_bytes(m.runtime_overhead_gib)
    sized = _serving_kv(m, min_kv, cuda_total, weights, overhead, base, problems)
    if sized is None:
        return None
    kv, kv_source, explicit = sized
    footprint = weights + kv + overhead
    util = _serving_utilization(m, explicit, footprint, cuda_total, base, problems,
                                f"weights {fmt_gib(weights)} + KV {fmt_gib(kv)} + runtime {fmt_gib(overhead)}")
    if min_kv is not None and kv < min_kv:
        problems.append(Problem(
            "", f"{base}.kv_cache_gib", m.kv_cache_gib,
            f"smaller than one max_model_len ({m.max_model_len:,}) sequence's KV ({fmt_gib(min_kv)}); vLLM "
            f"refuses to start. Raise it or lower max_model_len"))
    if footprint > cuda_total:
        problems.append(Problem(
            "", f"{base}", m.model,
            f"needs {fmt_gib(footprint)} (weights {fmt_gib(weights)} + KV {fmt_gib(kv)} + runtime "
            f"{fmt_gib(overhead)}), more than the device's CUDA total {fmt_gib(cuda_total)}"))
    shared_kv = _shared_kv(m, min_kv, kv, base, problems) if policy == "shrink" else None
    shared_util = _utilization(weights + shared_kv + overhead, cuda_total) if shared_kv is not None else None
    return ServingPlan(
        name=name, model=m.model, weights_bytes=weights, kv_cache_memory_bytes=kv, overhead_bytes=overhead,
        gpu_memory_utilization=util, explicit_kv=explicit, max_model_len=m.max_model_len,
        max_num_seqs=m.max_num_seqs, min_kv_bytes=min_kv, shared_kv_cache_memory_bytes=shared_kv,
        shared_gpu_memory_utilization=shared_util, weights_source=weights_source, kv_source=kv_source,
        fp8_weights_bytes=fp8_weights if m.weights_dtype != "fp8" and m.weights_gib is None else None,
    )


def _serving_weights(m: Any, arch: Any, base: str, problems: list[Problem]) -> tuple[int, str] | None:
    """The weights' bytes and where the number comes from (declared, or the shape at its dtype)."""
    if m.weights_gib is not None:
        return gib_bytes(m.weights_gib), "declared"
    if arch is not None:
        return _weights_bytes(arch, m.weights_dtype), f"{arch.name} x {m.weights_dtype}"
    problems.append(Problem("", f"{base}.weights_gib", None,
                            "is required when no `shape` is given (sparkguard cannot size the weights)"))
    return None


def _serving_kv(m: Any, min_kv: int | None, cuda_total: int, weights: int, overhead: int, base: str,
                problems: list[Problem]) -> tuple[int, str, bool] | None:
    """The KV cache's bytes, where the number comes from, and whether it is explicit (--kv-cache-memory-bytes)."""
    if m.kv_cache_gib is not None:
        return gib_bytes(m.kv_cache_gib), "declared", True
    if m.gpu_memory_utilization is not None:
        kv = math.floor(m.gpu_memory_utilization * cuda_total) - weights - overhead
        if kv <= 0:
            problems.append(Problem(
                "", f"{base}.gpu_memory_utilization", m.gpu_memory_utilization,
                f"{m.gpu_memory_utilization} x {fmt_gib(cuda_total)} leaves no KV cache after weights "
                f"{fmt_gib(weights)} + runtime {fmt_gib(overhead)}; vLLM would refuse to start"))
            return None
        return kv, "rest of gpu_memory_utilization", False
    if min_kv is not None:
        return min_kv * m.max_num_seqs, f"{m.max_num_seqs} x max_model_len sequences", True
    problems.append(Problem("", f"{base}.kv_cache_gib", None,
                            "is required when no `shape` is given (sparkguard cannot size the KV cache)"))
    return None


def _serving_utilization(m: Any, explicit: bool, footprint: int, cuda_total: int, base: str,
                         problems: list[Problem], parts: str) -> float:
    """gpu-memory-utilization: the footprint's share of the CUDA total, or the inventory's (never below it)."""
    if not explicit:
        return float(m.gpu_memory_utilization)
    util = _utilization(footprint, cuda_total)
    if m.gpu_memory_utilization is None:
        return util
    if m.gpu_memory_utilization < util:
        problems.append(Problem(
            "", f"{base}.gpu_memory_utilization", m.gpu_memory_utilization,
            f"below what the instance takes: {parts} = {fmt_gib(footprint)} is {util:.2f} of {fmt_gib(cuda_total)}; "
            f"leave it unset and sparkguard writes {util:.2f}"))
    return float(m.gpu_memory_utilization)


def _shared_kv(m: Any, min_kv: int | None, kv: int, base: str, problems: list[Problem]) -> int | None:
    """The KV cache while training runs (during_training: shrink): declared, or the default share."""
    if m.shared_kv_cache_gib is not None:
        shared_kv = gib_bytes(m.shared_kv_cache_gib)
    elif min_kv is not None:
        shared_kv = default_shared_kv(min_kv, kv)
    else:
        problems.append(Problem("", f"{base}.shared_kv_cache_gib", None,
                                "is required with during_training: shrink when no `shape` is given"))
        return None
    if shared_kv > kv:
        problems.append(Problem(
            "", f"{base}.shared_kv_cache_gib", m.shared_kv_cache_gib,
            f"larger than the full KV cache ({fmt_gib(kv)}): shrink would grow the server"))
    if min_kv is not None and shared_kv < min_kv:
        problems.append(Problem(
            "", f"{base}.shared_kv_cache_gib", m.shared_kv_cache_gib,
            f"smaller than one max_model_len ({m.max_model_len:,}) sequence's KV ({fmt_gib(min_kv)}); "
            f"vLLM refuses to start"))
    return shared_kv


def training_spec(job: Any) -> TrainingSpec:
    from .estimate import TrainingSpec

    model = _shape(job.model)
    assert model is not None, "a job estimated from its spec names its model"
    return TrainingSpec(
        model=model, method=job.method, rank=job.rank, target=job.target, seq_len=job.seq_len,
        micro_batch=job.micro_batch, dtype=job.dtype, gradient_checkpointing=job.gradient_checkpointing,
        attn=job.attn, loss=job.loss,
    )


def _plan_training(job: Any, problems: list[Problem]) -> TrainingPlan | None:
    from .estimate import estimate_training

    if not job.planned:
        return None
    if job.peak_gib is not None:
        return TrainingPlan(job.name, "declared", gib_bytes(job.peak_gib))
    try:
        spec = training_spec(job)
        est = estimate_training(spec)
    except ConfigError as error:
        for p in error.problems:
            problems.append(Problem("", "budget.training.model", job.model, p.allowed))
        return None
    cpu = gib_bytes(job.cpu_overhead_gib)
    return TrainingPlan(job.name, "estimated", est.peak_bytes + cpu, est.peak_bytes, cpu, spec,
                        dict(est.components), est.phase)


def has_budget(config: HostConfig) -> bool:
    """Anything to budget on this host: served models or a planned training job."""
    return bool(config.vllm.enabled and config.vllm.models) or config.budget.training.planned


def plan_host(host: str, config: HostConfig) -> HostPlan:
    """The budget of one host; ``problems`` holds inputs that prevent or spoil it (not the over-commit)."""
    total = config.node.memory_total_gib
    total_bytes = gib_bytes(total) if total is not None else None
    eo = config.earlyoom
    serving_on = bool(config.vllm.enabled and config.vllm.models)
    plan = HostPlan(
        host=host, device_profile=config.node.device_profile, memory_total_bytes=total_bytes,
        term_percent=eo.term_percent, kill_percent=eo.kill_percent, earlyoom_enabled=eo.enabled,
        os_reserve_bytes=gib_bytes(config.budget.os_reserve_gib), during_training=config.vllm.during_training,
    )
    if total_bytes is None:
        if has_budget(config):
            plan.problems.append(Problem(
                "", "node.memory_total_gib", None,
                "the memory budget (served models, training job) needs the node's MemTotal declared "
                "(`free -b` / 2^30; DGX Spark: about 121.7)"))
        return plan
    if eo.enabled:
        plan.term_bytes = math.floor(total_bytes * eo.term_percent / 100)
        plan.kill_bytes = math.floor(total_bytes * eo.kill_percent / 100)

    if serving_on:
        plan.cuda_total_bytes = cuda_total_bytes(config)
        if plan.cuda_total_bytes is None:
            plan.problems.append(Problem(
                "", "vllm.cuda_total_gib", None,
                f"no CUDA total is known for device profile '{config.node.device_profile}' (known: "
                f"{', '.join(f'{k} {v} GiB' for k, v in CUDA_TOTAL_GIB.items())}); declare node.device_profile, "
                f"or vllm.cuda_total_gib as measured with torch.cuda.mem_get_info()"))
        else:
            for name, model in sorted(config.vllm.models.items()):
                served = _plan_serving(name, model, plan.cuda_total_bytes, plan.during_training, plan.problems)
                if served is not None:
                    plan.serving.append(served)
    plan.training = _plan_training(config.budget.training, plan.problems)
    if plan.problems:
        return plan

    fixed = plan.term_bytes + plan.os_reserve_bytes
    full = sum(s.footprint_bytes for s in plan.serving)
    plan.phases.append(Phase("serving", full, 0, fixed + full, total_bytes - fixed - full))
    if plan.training is not None:
        during = sum(s.during_training_bytes(plan.during_training) for s in plan.serving)
        used = fixed + during + plan.training.peak_bytes
        plan.phases.append(Phase("training", during, plan.training.peak_bytes, used, total_bytes - used))
    if not plan.fits:
        plan.ways_out = ways_out(plan)
    return plan


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


def host_problems(config: HostConfig) -> list[Problem]:
    """Everything the budget refuses for one host: bad inputs, then the over-commit."""
    if not has_budget(config):
        return []
    plan = plan_host("", config)
    return plan.problems + budget_problems(plan)


def plan_document(plans: list[HostPlan]) -> dict[str, Any]:
    return {"schema": 1, "hosts": [p.to_dict() for p in plans]}
