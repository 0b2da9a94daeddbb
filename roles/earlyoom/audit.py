"""How `sparkguard audit` judges role earlyoom: which guard runs, with which arguments, and whether its lines
mean anything on this node (earlyoom 1.8+ measures against MemAvailable+AnonPages, blind to driver memory)."""

from __future__ import annotations

import base64
import json
from typing import Any

from sparkguard.audit.checks import AuditView, Check, q

from .facts import guard_versions
from .guard import FIRST_ANON_RELATIVE, choose_guard
from .state import RANKING_STATUS, earlyoom_args


def probe(config: Any) -> list[str]:
    return [
        "pid=$(systemctl show -p MainPID --value earlyoom.service 2>/dev/null)",
        "r earlyoom_active \"$(systemctl is-active earlyoom.service 2>/dev/null)\"",
        "r nohang_active \"$(systemctl is-active nohang.service 2>/dev/null)\"",
        "r oomd_active \"$(systemctl is-active systemd-oomd.service 2>/dev/null)\"",
        "if [ -n \"$pid\" ] && [ \"$pid\" != 0 ]; then r earlyoom_cmdline \"$(base64 -w0 < /proc/$pid/cmdline 2>/dev/null)\"; fi",
        f"r gpu_ranking \"$(cat {q(RANKING_STATUS)} 2>/dev/null)\"",
        "r clock \"$(date +%s)\"",
    ]


def gpu_ranking_verdict(raw: str, clock: str) -> tuple[bool, str]:
    """The GPU ranking agent's own status, judged: a missing, stale or failing agent is not ok.

    No nvidia-smi on the node is ok (nothing to rank by), and said.
    """
    try:
        status = json.loads(raw)
        age = int(clock) - int(status["time"])
        state, detail, interval = status["state"], status["detail"], float(status["interval_s"])
    except (ValueError, KeyError, TypeError):
        return False, "no status from sparkguard-gpu-ranking (not running?)"
    if age > max(30, 5 * interval):
        return False, f"status is {age} s old (agent stuck or stopped): {state}: {detail}"
    if state == "ok":
        holders = ", ".join(f"{h['comm']} {h['pid']} ({h['class']}, adj {h['adj']})" for h in status["holders"][:4])
        return True, f"{detail}" + (f": {holders}" if holders else "")
    if state == "no-nvidia-smi":
        return True, detail
    if state == "blind":
        return False, f"nvidia-smi is blind: {detail}"
    return False, f"{state}: {detail} (earlyoom's name rules only)"


def _thresholds(view: AuditView, version: str) -> Check:
    info, settings = view.info, view.config.earlyoom
    name, want = "earlyoom: thresholds hold on unified memory", "1.7 (MemAvailable/MemTotal)"
    if not info.unified_memory:
        return Check(name, True, want, f"{version}; not a unified-memory node ({info.device_class})")
    installed = guard_versions(info).earlyoom
    if installed is not None and installed >= FIRST_ANON_RELATIVE:
        accepted = settings.newer_version == "accept-anon-relative"
        return Check(name, accepted, want, f"{version}: percent of MemAvailable+AnonPages, blind to driver memory"
                     + (" (accepted by earlyoom.newer_version)" if accepted else ""))
    return Check(name, installed is not None, want, version)


def options_of(argv: list[str]) -> list[str]:
    """A running earlyoom's arguments: from its first option on. Natively /proc/PID/cmdline is the program
    then its options; under qemu user emulation (an arm64 sandbox node) the program's path comes twice.

    >>> options_of(["/usr/bin/earlyoom", "-m", "8,4"]), options_of(["/usr/bin/earlyoom", "/usr/bin/earlyoom", "-m", "8,4"])
    (['-m', '8,4'], ['-m', '8,4'])
    """
    first = next((i for i, arg in enumerate(argv) if arg.startswith("-")), len(argv))
    return argv[first:]


def checks(view: AuditView) -> list[Check]:
    info, rt, settings = view.info, view.runtime, view.config.earlyoom
    choice = choose_guard(settings, info)
    running = [g for g in ("earlyoom", "nohang") if rt.get(f"{g}_active") == "active"]
    oomd = rt.get("oomd_active") == "active"
    kept = oomd and settings.systemd_oomd == "keep"
    actual = ", ".join(running + (["systemd-oomd"] if oomd else [])) + " running" if running or oomd else "no guard running"
    found = [Check("earlyoom: one low-memory guard", running == [choice.guard] and (not oomd or kept),
                   f"{choice.guard} only ({choice.reason})", actual + (" (systemd-oomd kept: earlyoom.systemd_oomd)"
                                                                       if kept else ""))]
    versions = guard_versions(info)
    if choice.guard == "nohang":
        version = ".".join(map(str, versions.nohang or ())) or "not installed"
        found.append(Check("earlyoom: thresholds hold on unified memory", versions.nohang is not None,
                           "nohang (MemAvailable against a line of MemTotal)", f"nohang {version}"))
    else:
        version = ".".join(map(str, versions.earlyoom or ())) or "not installed"
        active = rt.get("earlyoom_active", "")
        found.append(Check("earlyoom: running", active == "active", "active", f"{active or 'unknown'} (version {version})"))
        want = earlyoom_args(settings)
        raw = rt.get("earlyoom_cmdline", "")
        running_args = options_of([a for a in base64.b64decode(raw).decode(errors="replace").split("\0") if a]
                                  if raw else [])
        found.append(Check("earlyoom: args of the running process", running_args == want, " ".join(want)[:120],
                           (" ".join(running_args) or "no earlyoom process")[:120] if running_args != want else "match"))
        found.append(_thresholds(view, version))
    if settings.gpu_ranking:
        ok, actual = gpu_ranking_verdict(rt.get("gpu_ranking", ""), rt.get("clock", ""))
        found.append(Check("earlyoom: GPU memory in the victim ranking", ok, "agent fresh (or no nvidia-smi)", actual))
    return found
