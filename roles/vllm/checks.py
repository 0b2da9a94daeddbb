"""Checks of role ``vllm``: names, ports, option names (pinned vLLM list), secrets, the budget inputs."""

from __future__ import annotations

import re
from collections.abc import Iterator

from sparkguard.errors import Problem
from sparkguard.facts import NodeInfo
from sparkguard.hostconfig import HostConfig, settings_of
from sparkguard.inventory.secrets import read_secret, source_words

from ..base.settings import BaseSettings
from .images import ARM64_MACHINES, default_image, missing_image_reason
from .options import option_problem, secret_option
from .settings import VllmSettings

# Secret settings: (what, the env-variable field, the file field); both read on the operator's machine.
SECRETS = (("Hugging Face token", "hf_token_env", "hf_token_file"), ("vLLM API key", "api_key_env", "api_key_file"))

NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
TOKEN = re.compile(r"^[A-Za-z0-9_.\-]+$")
HIDDEN = "<hidden>"


# Directories the cache may not be (nor lie directly in, for the kernel's own trees): chmod 0700 of
# one of them, or mounting it into a container, would break the node or expose it.
SYSTEM_DIRECTORIES = frozenset({
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/media", "/mnt", "/opt", "/proc",
    "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/usr/bin", "/usr/lib", "/usr/local", "/usr/sbin",
    "/var", "/var/lib", "/var/log", "/var/tmp", "/var/lib/docker", "/var/lib/sparkguard",
})
SYSTEM_TREES = ("/proc/", "/sys/", "/dev/", "/etc/", "/boot/", "/run/", "/usr/", "/bin/", "/sbin/", "/lib/")


def system_directory(path: str) -> bool:
    normal = path.rstrip("/") or "/"
    return normal in SYSTEM_DIRECTORIES or normal.startswith(SYSTEM_TREES)


def problems(config: HostConfig) -> Iterator[Problem]:
    settings: VllmSettings = config.vllm
    if not settings.models:
        return
    if settings.during_training != "keep" and not settings_of(config, BaseSettings).enabled:
        # Explicit input from role base: it owns sparkguard-training.target, which these servers follow.
        yield Problem("", "base.enabled", False, f"vllm.during_training: {settings.during_training} follows "
                      f"sparkguard-training.target, which role base installs; enable base, or set "
                      f"vllm.during_training: keep")
    ports: dict[int, str] = {}
    for name, model in sorted(settings.models.items()):
        base = f"vllm.models.{name}"
        if not NAME.match(name):
            yield Problem("", base, name, "instance names are 1-40 lowercase letters, digits and dashes (they name"
                                          " a systemd instance, a container and files)")
        if model.port in ports:
            yield Problem("", f"{base}.port", model.port, f"already used by vllm.models.{ports[model.port]}")
        ports[model.port] = name
        for key, value in model.options.items():
            reason = option_problem(str(key))
            if reason:
                shown = HIDDEN if secret_option(str(key)) else value
                yield Problem("", f"{base}.options.{key}", shown, reason)
    if settings.runtime == "docker":
        profile = config.node.device_profile
        image = settings.image or default_image(profile)
        tag = (image or "").rsplit("/", 1)[-1]
        if image is None:
            yield Problem("", "vllm.image", None, missing_image_reason(f"device profile {profile}"))
        elif "@sha256:" not in image and (":" not in tag or tag.endswith(":latest")):
            yield Problem("", "vllm.image", image, "pin a tag or digest (not `latest`): a pull must not change"
                                                   " the server under a running budget")
    elif not settings.native_binary.startswith("/"):
        yield Problem("", "vllm.native_binary", settings.native_binary, "must be an absolute path on the node")
    if system_directory(settings.hf_cache_dir):
        yield Problem("", "vllm.hf_cache_dir", settings.hf_cache_dir,
                      "is a system directory: sparkguard makes the cache directory root-only (0700) and mounts it"
                      " into the container; use a directory of its own, e.g. /var/lib/sparkguard/hf-cache or /srv/hf")
    for _what, env_field, file_field in SECRETS:
        env_value, file_value = getattr(settings, env_field), getattr(settings, file_field)
        if env_value and file_value:
            yield Problem("", f"vllm.{file_field}", file_value, f"set either {env_field} or {file_field}, not both")
        if file_value and not file_value.startswith(("/", "~")):
            yield Problem("", f"vllm.{file_field}", file_value, "must be an absolute or ~ path on the operator's machine")
    # Budget inputs (sizes, shapes, CUDA total); the over-commit itself is the budget role's check.
    from ..budget.interface import plan_host  # here: budget's planner imports vllm's settings

    yield from plan_host("", config).problems


def preflight(config: HostConfig, info: NodeInfo) -> Iterator[Problem]:
    """On apply only: an image that runs on the node's architecture; a readable, env-file-safe token."""
    settings: VllmSettings = config.vllm
    if (settings.models and settings.runtime == "docker" and settings.image is None
            and info.arch in ARM64_MACHINES):
        yield Problem("", "vllm.image", None, missing_image_reason(f"this {info.arch} node (device profile "
                                                                   f"{config.node.device_profile})"))
    if not settings.models:
        return
    for what, env_field, file_field in SECRETS:
        env_value, file_value = getattr(settings, env_field), getattr(settings, file_field)
        if not (env_value or file_value):
            continue
        source = source_words(env_value, file_value)
        field = f"vllm.{env_field}" if env_value else f"vllm.{file_field}"
        secret = read_secret(env_value, file_value, "secret", f"vllm.{file_field}")
        if secret is None:
            yield Problem("", field, env_value or file_value,
                          f"no {what} in the {source} on this machine; export it or fix the setting")
        elif not TOKEN.match(secret):
            yield Problem("", field, HIDDEN, f"the {what} in the {source} has characters an env file cannot hold "
                                             f"safely (allowed: letters, digits, _ . -)")
