"""Defaults of role ``earlyoom``: every variable, in one place.

The numbers come from the incident: the node froze 30-45 minutes after
MemAvailable started falling; earlyoom must act while SSH still works.
"""

from __future__ import annotations

from typing import Literal

from sparkguard.settings import Settings, setting


class EarlyoomSettings(Settings):
    """earlyoom as the last line of defence: the trainer dies first, sshd survives."""

    enabled: bool = setting(True, "Install and run the low-memory guard (earlyoom, or nohang where earlyoom is 1.8+).")
    guard: Literal["auto", "earlyoom", "nohang"] = setting(
        "auto",
        "Which low-memory guard runs; the settings below drive either. auto = earlyoom where the node's earlyoom"
        " is 1.7 (Debian 12, Ubuntu 24.04 / DGX OS 7), nohang where it is 1.8+ (Debian 13, Ubuntu 26.04), whose"
        " lines would ignore driver memory (docs/earlyoom-measurements.md). Render cannot see the node: it"
        " shows earlyoom for auto, so declare nohang for a Debian 13 / Ubuntu 26.04 host to review it exactly."
        " Switching stops and disables the other guard: exactly one runs.")
    term_percent: float = setting(
        8.0, "SIGTERM when MemAvailable falls to this share of MemTotal (8% of a DGX Spark = 9.7 GiB).",
        unit="% of MemTotal", gt=0, lt=100)
    kill_percent: float = setting(
        4.0, "SIGKILL when MemAvailable falls to this share of MemTotal (a SIGTERM'd job that does not exit).",
        unit="% of MemTotal", gt=0, lt=100)
    report_interval_s: int = setting(
        60, "How often earlyoom logs memory status to the journal (0 = never).", unit="s", ge=0, le=86400)
    prefer_plain_python: bool = setting(
        False,
        "Also prefer every plain python/python3/python3.x by name (+300 in earlyoom's score). Off: a current"
        " PyTorch trainer is named python3 like a notebook or a python-run server, and +300 would put a"
        " notebook above serving (docs/roles/earlyoom.md, class order). Trainers are found by the GPU memory"
        " they hold (gpu_ranking) and by their mark (sparkguard-train, sparkguard-oom-first). Turn on only on"
        " a node where nothing but trainers runs as python.")
    gpu_ranking: bool = setting(
        True,
        "Run sparkguard-gpu-ranking: every few seconds it reads per-process GPU memory from nvidia-smi (on a"
        " unified-memory node that is host RAM, invisible to RSS) and raises each holder's oom_score_adj into"
        " its class's band, so the kernel and earlyoom rank by true footprint. Installed everywhere; on a"
        " node without nvidia-smi it reports so and does nothing else.")
    gpu_ranking_interval_s: float = setting(
        2.0, "How often the GPU ranking agent looks (one nvidia-smi call each time).", unit="s", ge=0.5, le=60)
    prefer_extra: tuple[str, ...] = setting(
        (), "Extra process names (comm, regex fragments) to kill first, besides PyTorch/python/launchers.")
    avoid_extra: tuple[str, ...] = setting(
        (), "Extra process names (comm, regex fragments) to spare, besides sshd/systemd/journald/monitoring.")
    serving_extra: tuple[str, ...] = setting(
        (), "Extra serving process names (comm, regex fragments) besides vLLM, ollama, llama-server, SGLang,"
        " trtllm-serve, Triton and TGI: the GPU ranking agent never ranks them into the holder band.")
    serving_units_extra: tuple[str, ...] = setting(
        (), "Extra serving units (system unit names or globs, e.g. my-llm@*.service) besides sparkguard-vllm@,"
        " ollama.service, llama-server*.service and tritonserver*.service: read from /system.slice only.")
    kill_process_group: bool = setting(
        True, "Kill the victim's whole process group (-g; nohang: the action script signals the group): a"
        " trainer's forked workers keep its driver memory alive after it dies, and earlyoom 1.7 then waits for"
        " the whole group (up to 10 s, SIGKILL at the kill line) before it picks anyone else.")
    systemd_oomd: Literal["disable", "keep"] = setting(
        "disable", "systemd-oomd (Ubuntu desktop images, DGX OS) kills whole user cgroups by memory pressure and"
        " ignores oom_score_adj: a second guard. disable = stop, disable and mask it where it is installed, so"
        " exactly one guard decides; keep = leave it running beside the guard (audit says so).")
    newer_version: Literal["refuse", "accept-anon-relative"] = setting(
        "refuse",
        "earlyoom 1.8+ (Debian 13) measures MemAvailable against MemAvailable+AnonPages, which leaves GPU driver"
        " memory out: its lines would fire late or never on unified memory (docs/earlyoom-measurements.md)."
        " refuse = apply stops on such a node; accept-anon-relative = install it anyway, knowingly.")
