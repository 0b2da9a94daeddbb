"""The node budget built from the settings: role budget's reading of vllm's models, its own training job
and earlyoom's lines (declared reads), into the core's plan types (sparkguard/domain/memory/planner.py).

The core keeps the arithmetic and the plan types, which name no role; what a setting means for the budget
(a served model's weights and KV cache, a training job's peak) is read here, typed. ``sparkguard plan`` asks
for it through ``Role.plan``; role vllm sizes its servers with ``plan_host`` (budget's interface).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from sparkguard.domain.memory.planner import (
    CUDA_TOTAL_GIB,
    HostPlan,
    Phase,
    ServingPlan,
    TrainingPlan,
    budget_problems,
    default_shared_kv,
    fmt_gib,
    gib_bytes,
    model_shape,
    utilization_step,
    ways_out,
    weights_bytes,
)
from sparkguard.errors import ConfigError, Problem
from sparkguard.hostconfig import HostConfig, settings_of

from ..earlyoom.settings import EarlyoomSettings
from ..vllm.settings import ServedModel, VllmSettings
from .settings import BudgetSettings, TrainingJob

if TYPE_CHECKING:
    from sparkguard.domain.memory.estimate import Architecture, TrainingSpec


def cuda_total_bytes(config: HostConfig) -> int | None:
    declared = settings_of(config, VllmSettings).cuda_total_gib
    if declared is not None:
        return gib_bytes(declared)
    known = CUDA_TOTAL_GIB.get(config.node.device_profile)
    return gib_bytes(known) if known is not None else None


def _plan_serving(name: str, m: ServedModel, cuda_total: int, policy: str, problems: list[Problem]) -> ServingPlan | None:
    """One vLLM instance (``m``: roles.vllm's ServedModel): weights, KV cache, runtime, and the utilization they mean."""
    from sparkguard.domain.memory.estimate import kv_cache_bytes

    base = f"vllm.models.{name}"
    try:
        arch = model_shape(m.shape)
    except ConfigError as error:
        for p in error.problems:
            problems.append(Problem("", f"{base}.shape", m.shape, p.allowed))
        return None
    kv_dtype_bytes = 1 if m.kv_cache_dtype == "fp8" else 2
    min_kv = kv_cache_bytes(arch, m.max_model_len, kv_dtype_bytes) if arch else None
    fp8_weights = weights_bytes(arch, "fp8") if arch else None
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
    shared_util = utilization_step(weights + shared_kv + overhead, cuda_total) if shared_kv is not None else None
    return ServingPlan(
        name=name, model=m.model, weights_bytes=weights, kv_cache_memory_bytes=kv, overhead_bytes=overhead,
        gpu_memory_utilization=util, explicit_kv=explicit, max_model_len=m.max_model_len,
        max_num_seqs=m.max_num_seqs, min_kv_bytes=min_kv, shared_kv_cache_memory_bytes=shared_kv,
        shared_gpu_memory_utilization=shared_util, weights_source=weights_source, kv_source=kv_source,
        fp8_weights_bytes=fp8_weights if m.weights_dtype != "fp8" and m.weights_gib is None else None,
    )


def _serving_weights(m: ServedModel, arch: Architecture | None, base: str, problems: list[Problem]) -> tuple[int, str] | None:
    """The weights' bytes and where the number comes from (declared, or the shape at its dtype)."""
    if m.weights_gib is not None:
        return gib_bytes(m.weights_gib), "declared"
    if arch is not None:
        return weights_bytes(arch, m.weights_dtype), f"{arch.name} x {m.weights_dtype}"
    problems.append(Problem("", f"{base}.weights_gib", None,
                            "is required when no `shape` is given (sparkguard cannot size the weights)"))
    return None


def _serving_kv(m: ServedModel, min_kv: int | None, cuda_total: int, weights: int, overhead: int, base: str,
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


def _serving_utilization(m: ServedModel, explicit: bool, footprint: int, cuda_total: int, base: str,
                         problems: list[Problem], parts: str) -> float:
    """gpu-memory-utilization: the footprint's share of the CUDA total, or the inventory's (never below it)."""
    if not explicit:
        # Not explicit: _serving_kv took the KV cache from the declared utilization, so it is set.
        assert m.gpu_memory_utilization is not None
        return float(m.gpu_memory_utilization)
    util = utilization_step(footprint, cuda_total)
    if m.gpu_memory_utilization is None:
        return util
    if m.gpu_memory_utilization < util:
        problems.append(Problem(
            "", f"{base}.gpu_memory_utilization", m.gpu_memory_utilization,
            f"below what the instance takes: {parts} = {fmt_gib(footprint)} is {util:.2f} of {fmt_gib(cuda_total)}; "
            f"leave it unset and sparkguard writes {util:.2f}"))
    return float(m.gpu_memory_utilization)


def _shared_kv(m: ServedModel, min_kv: int | None, kv: int, base: str, problems: list[Problem]) -> int | None:
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


def training_spec(job: TrainingJob) -> TrainingSpec:
    from sparkguard.domain.memory.estimate import TrainingSpec

    model = model_shape(job.model)
    assert model is not None, "a job estimated from its spec names its model"
    return TrainingSpec(
        model=model, method=job.method, rank=job.rank, target=job.target, seq_len=job.seq_len,
        micro_batch=job.micro_batch, dtype=job.dtype, gradient_checkpointing=job.gradient_checkpointing,
        attn=job.attn, loss=job.loss,
    )


def _plan_training(job: TrainingJob, problems: list[Problem]) -> TrainingPlan | None:
    from sparkguard.domain.memory.estimate import estimate_training

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
    vllm = settings_of(config, VllmSettings)
    return bool(vllm.enabled and vllm.models) or settings_of(config, BudgetSettings).training.planned


def plan_host(host: str, config: HostConfig) -> HostPlan:
    """The budget of one host; ``problems`` holds inputs that prevent or spoil it (not the over-commit)."""
    total = config.node.memory_total_gib
    total_bytes = gib_bytes(total) if total is not None else None
    eo = settings_of(config, EarlyoomSettings)
    vllm, budget = settings_of(config, VllmSettings), settings_of(config, BudgetSettings)
    serving_on = bool(vllm.enabled and vllm.models)
    plan = HostPlan(
        host=host, device_profile=config.node.device_profile, memory_total_bytes=total_bytes,
        term_percent=eo.term_percent, kill_percent=eo.kill_percent, earlyoom_enabled=eo.enabled,
        os_reserve_bytes=gib_bytes(budget.os_reserve_gib), during_training=vllm.during_training,
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
            for name, model in sorted(vllm.models.items()):
                served = _plan_serving(name, model, plan.cuda_total_bytes, plan.during_training, plan.problems)
                if served is not None:
                    plan.serving.append(served)
    plan.training = _plan_training(budget.training, plan.problems)
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


def host_problems(config: HostConfig) -> list[Problem]:
    """Everything the budget refuses for one host: bad inputs, then the over-commit."""
    if not has_budget(config):
        return []
    plan = plan_host("", config)
    return plan.problems + budget_problems(plan)

