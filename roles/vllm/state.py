"""Desired state of role ``vllm``: configs sized by the node budget, units that follow training mode."""

from __future__ import annotations

from typing import Any

import yaml

from sparkguard.domain.memory.planner import ServingPlan, fmt_gib
from sparkguard.inventory.secrets import read_secret
from sparkguard.layout import CONFIG_DIR, LIB_DIR, UNIT_DIR, dropin_path, unit_path
from sparkguard.role import RoleContext, shipped_program
from sparkguard.state import AbsentFiles, AbsentInstances, DesiredState, Directory, ManagedFile, Service
from sparkguard.templating import render_template, sandbox

from ..base.interface import TRAINING_TARGET
from .images import DOCKER_HUB_IMAGE, default_image
from .interface import MODE_DIR as VLLM_MODE_DIR
from .interface import SERVING_UNIT_PREFIX
from .options import VLLM_VERSION
from .settings import ServedModel, VllmSettings

VLLM_CONFIG_DIR = f"{CONFIG_DIR}/vllm"
MODE_DIR = VLLM_MODE_DIR
MODE_SCRIPT = f"{LIB_DIR}/vllm-mode"
MODE_SCRIPT_SOURCE = shipped_program(__file__, "mode.sh")  # its unit passes the paths
SERVICE_TEMPLATE = f"{SERVING_UNIT_PREFIX}.service"
TRAINING_TEMPLATE = "sparkguard-vllm-training@.service"
# Where earlier versions put a copy of the training target; role base owns it now, so it is removed.
FALLBACK_TARGET = f"/usr/local/lib/systemd/system/{TRAINING_TARGET}"
VERIFY_UNIT = (
    "d=$(mktemp -d) && cp {path} \"$d/%s\" && systemd-analyze verify \"$d/%s\"; rc=$?; rm -rf \"$d\"; exit $rc"
)
ENV_HEADER = "# Managed by sparkguard (role vllm); mode 0600. Environment of vLLM '{name}'.\n"


def service_name(name: str) -> str:
    return f"sparkguard-vllm@{name}.service"


def config_path(name: str, shared: bool = False) -> str:
    return f"{VLLM_CONFIG_DIR}/{name}{'.shared' if shared else ''}.yaml"


def env_path(name: str) -> str:
    return f"{VLLM_CONFIG_DIR}/{name}.env"


def read_token(settings: VllmSettings) -> str | None:
    """The Hugging Face token from the operator's machine; None if no source is configured or readable."""
    return read_secret(settings.hf_token_env, settings.hf_token_file, "secret", "vllm.hf_token_file")


def read_api_key(settings: VllmSettings) -> str | None:
    """The key clients must send (vLLM reads VLLM_API_KEY), from the operator's machine."""
    return read_secret(settings.api_key_env, settings.api_key_file, "secret", "vllm.api_key_file")


def env_file(name: str, settings: VllmSettings) -> str:
    """The instance's env file (0600, a placeholder in renders): the only place its secrets land."""
    lines = [ENV_HEADER.format(name=name)]
    token = read_token(settings)
    if token:
        lines.append(f"HF_TOKEN={token}\n")
    key = read_api_key(settings)
    if key:
        lines.append(f"VLLM_API_KEY={key}\n")
    return "".join(lines)


def vllm_options(name: str, model: ServedModel, served: ServingPlan, settings: VllmSettings,
                 shared: bool) -> dict[str, Any]:
    options: dict[str, Any] = {
        "model": model.model,
        "served-model-name": name,
        "host": settings.listen,
        "port": model.port,
        "dtype": "float16" if model.weights_dtype == "fp16" else "bfloat16",
    }
    if model.weights_dtype == "fp8":
        options["quantization"] = "fp8"
    if model.kv_cache_dtype != "auto":
        options["kv-cache-dtype"] = model.kv_cache_dtype
    options["max-model-len"] = model.max_model_len
    options["max-num-seqs"] = model.max_num_seqs
    if shared:
        options["gpu-memory-utilization"] = served.shared_gpu_memory_utilization
        options["kv-cache-memory-bytes"] = served.shared_kv_cache_memory_bytes
    else:
        options["gpu-memory-utilization"] = served.gpu_memory_utilization
        if served.explicit_kv:
            options["kv-cache-memory-bytes"] = served.kv_cache_memory_bytes
    for key in sorted(model.options):
        options[key] = model.options[key]
    return options


def config_file(name: str, model: ServedModel, served: ServingPlan, settings: VllmSettings, cuda_total: int,
                shared: bool) -> str:
    options = vllm_options(name, model, served, settings, shared)
    kv = served.shared_kv_cache_memory_bytes if shared else served.kv_cache_memory_bytes
    footprint = served.shared_footprint_bytes if shared else served.footprint_bytes
    return render_template(
        "vllm/config.yaml.j2", instance=name, mode="shared (training)" if shared else "full",
        vllm_version=VLLM_VERSION, weights=fmt_gib(served.weights_bytes), kv=fmt_gib(kv or 0),
        overhead=fmt_gib(served.overhead_bytes), footprint=fmt_gib(footprint or 0),
        cuda_total=fmt_gib(cuda_total), util=options["gpu-memory-utilization"],
        explicit_kv=shared or served.explicit_kv,
        body=yaml.safe_dump(options, sort_keys=False, default_flow_style=False).rstrip("\n"),
    )


def leftovers(keep: list[str]) -> dict[str, Any]:
    """What must go: vLLM instances the inventory no longer lists, and role files it no longer asks for.

    Without this, deleting a model from vllm.models would leave its server running on memory the
    budget now gives to something else (the over-commit the budget exists to prevent), and switching
    during_training to `keep` would leave drop-ins that still stop servers during training. Only
    sparkguard's own vLLM paths and units are named.
    """
    return {
        "absent_instances": (AbsentInstances(
            "no longer in vllm.models", template=SERVICE_TEMPLATE.replace("@", "@{}", 1), keep=tuple(sorted(keep)),
            companions=(TRAINING_TEMPLATE.replace("@", "@{}", 1),), files=(f"{MODE_DIR}/{{}}.mode",)),),
        "absent_files": (AbsentFiles("no longer in the inventory", globs=(
            f"{VLLM_CONFIG_DIR}/*.yaml", f"{VLLM_CONFIG_DIR}/*.env",
            f"{UNIT_DIR}/{TRAINING_TARGET}.d/50-sparkguard-vllm-*.conf",
            MODE_SCRIPT, FALLBACK_TARGET, unit_path(TRAINING_TEMPLATE))),),
    }


def desired_state(ctx: RoleContext) -> DesiredState:
    settings: VllmSettings = ctx.settings("vllm")
    if not settings.models:
        return DesiredState(role="vllm", **leftovers([]))
    from ..budget.interface import plan_host  # here: budget's planner imports vllm's settings

    plan = plan_host(ctx.host, ctx.config)
    served = {s.name: s for s in plan.serving}
    policy = settings.during_training
    common = dict(config_dir=VLLM_CONFIG_DIR, mode_dir=MODE_DIR, mode_script=MODE_SCRIPT,
                  training_target=TRAINING_TARGET, policy=policy)

    service_unit = unit_path(SERVICE_TEMPLATE)
    files = [
        ManagedFile(service_unit, render_template(
            "vllm/vllm@.service.j2", runtime=settings.runtime,
            image=settings.image or default_image(ctx.node.device_class) or DOCKER_HUB_IMAGE,
            drop_caches=ctx.node.unified_memory is True,
            native_binary=settings.native_binary, hf_cache_dir=settings.hf_cache_dir,
            oom_score_adj=settings.oom_score_adj, **common),
            validate=VERIFY_UNIT % (("sparkguard-vllm@check.service",) * 2)),
    ]
    if policy != "keep":
        files += [
            ManagedFile(MODE_SCRIPT, MODE_SCRIPT_SOURCE.read_text(), mode="0755", validate="sh -n {path}"),
            # It only writes the mode files and asks systemd (AF_UNIX, as root) to restart or stop vLLM.
            ManagedFile(unit_path(TRAINING_TEMPLATE), render_template(
                "vllm/training@.service.j2", sandbox=sandbox(("/run/sparkguard",), ""), **common),
                        validate=VERIFY_UNIT % (("sparkguard-vllm-training@check.service",) * 2)),
        ]
    services = []
    for name, model in sorted(settings.models.items()):
        plan_entry = served[name]
        files.append(ManagedFile(config_path(name), config_file(
            name, model, plan_entry, settings, plan.cuda_total_bytes or 0, shared=False)))
        triggers = [config_path(name), env_path(name), service_unit]
        if policy == "shrink":
            files.append(ManagedFile(config_path(name, shared=True), config_file(
                name, model, plan_entry, settings, plan.cuda_total_bytes or 0, shared=True)))
            triggers.append(config_path(name, shared=True))
        files.append(ManagedFile(env_path(name), env_file(name, settings), mode="0600", secret=True))
        if policy != "keep":
            files.append(ManagedFile(
                dropin_path(TRAINING_TARGET, f"50-sparkguard-vllm-{name}.conf"),
                render_template("vllm/training-dropin.conf.j2", instance=name, **common)))
        services.append(Service(service_name(name), restart_on=tuple(triggers)))

    directories = [Directory(VLLM_CONFIG_DIR)]
    if settings.runtime == "docker":
        directories.append(Directory(settings.hf_cache_dir, mode="0700"))
    return DesiredState(role="vllm", directories=tuple(directories), files=tuple(files), services=tuple(services),
                        **leftovers(list(settings.models)))


__all__ = ["desired_state", "service_name", "config_path", "env_path", "UNIT_DIR"]
