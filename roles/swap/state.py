"""Desired state of role ``swap``."""

from __future__ import annotations

import json
from typing import Any

from sparkguard.hostconfig import settings_of
from sparkguard.layout import BIN_DIR, CONFIG_DIR, LIB_DIR, STATE_DIR, dropin_path, unit_path
from sparkguard.role import RoleContext, shipped_program
from sparkguard.state import DesiredState, Directory, Ensure, FileEdit, ManagedFile, Service
from sparkguard.templating import render_template, sandbox

from ..base.interface import NODE_JSON, SYSCTL_CHECK, TRAINING_TARGET
from ..budget.interface import BUDGET_JSON
from ..earlyoom.settings import EarlyoomSettings
from ..vllm.interface import MODE_DIR as VLLM_MODE_DIR
from .fstab import DISABLE, ENABLE, MARKER
from .interface import SWAPOFF_SERVICE, TRAINING_JOB_PREFIX
from .settings import SwapSettings

TOGGLE = f"{LIB_DIR}/swap-toggle"
TOGGLE_SOURCE = shipped_program(__file__, "swap-toggle.sh")
LAUNCHER = f"{BIN_DIR}/sparkguard-train"
# The launcher's layout; the launcher (shipped as it is) reads it from this path (tests check they agree).
TRAIN_CONFIG = f"{CONFIG_DIR}/train.json"
RUNS_DIR = f"{STATE_DIR}/train"
RECORD = "/run/sparkguard/swap-before-training"
# While training mode is on, a timer checks that a job still holds it (a launcher killed between
# entering training mode and starting its job would leave swap off for good): the first check
# REAPER_GRACE_S after entering, then every REAPER_INTERVAL_S.
REAPER_SERVICE = "sparkguard-training-reaper.service"
REAPER_TIMER = "sparkguard-training-reaper.timer"
REAPER_GRACE_S = 30
REAPER_INTERVAL_S = 30
SYSCTL_FILE = "/etc/sysctl.d/60-sparkguard-swap.conf"
# Everything that can turn swap on at boot besides fstab: swap.target pulls in every
# .swap unit (fstab, systemd-gpt-auto); zram comes from systemd-zram-generator or zram-tools.
BOOT_SWAP_UNITS = ("swap.target", "systemd-zram-setup@zram0.service", "dev-zram0.swap", "zramswap.service")


LAUNCHER_KEYS = ("training_target", "swapoff_service", "job_prefix", "node_json", "runs_dir", "budget_json",
                 "vllm_mode_dir", "term_percent")


def launcher_config(names: dict[str, Any]) -> str:
    """train.json: what sparkguard-train needs to know about this node, from the same names as every file here."""
    config = {key: names[key] for key in LAUNCHER_KEYS}
    config["term_percent"] = float(config["term_percent"])
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def desired_state(ctx: RoleContext) -> DesiredState:
    settings: SwapSettings = ctx.settings("swap")
    earlyoom = settings_of(ctx.config, EarlyoomSettings)
    reserve = earlyoom.term_percent if earlyoom.enabled else 0
    names = {"training_target": TRAINING_TARGET, "swapoff_service": SWAPOFF_SERVICE, "toggle": TOGGLE,
             "record": RECORD, "timeout_s": settings.swapoff_timeout_s, "reserve_percent": int(reserve),
             "node_json": NODE_JSON, "runs_dir": RUNS_DIR, "term_percent": f"{earlyoom.term_percent:g}",
             # Explicit inputs from roles budget and vllm: what entering training mode frees.
             "budget_json": BUDGET_JSON, "vllm_mode_dir": VLLM_MODE_DIR, "job_prefix": TRAINING_JOB_PREFIX,
             "launcher": LAUNCHER, "reaper_timer": REAPER_TIMER, "grace_s": REAPER_GRACE_S,
             "interval_s": REAPER_INTERVAL_S}
    off = settings.mode == "off"
    files = (
        ManagedFile(TOGGLE, TOGGLE_SOURCE.read_text(), mode="0755", validate="sh -n {path}"),
        ManagedFile(TRAIN_CONFIG, launcher_config(names),
                    validate="python3 -c \"import json, sys; json.load(open(sys.argv[1]))\" {path}"),
        ManagedFile(LAUNCHER, shipped_program(__file__, "train_launcher.py").read_text(), mode="0755",
                    validate="python3 -c \"import ast, sys; ast.parse(open(sys.argv[1]).read())\" {path}"),
        # Not confined by the shared sandbox (docs/security.md): with it, swap was not restored after a killed
        # launcher in one CI run of the qemu tests. A likelier cause, found since: a launcher killed before its
        # job existed left training mode on for good (the reaper below ends that); retrying the sandbox is open.
        ManagedFile(unit_path(SWAPOFF_SERVICE), render_template("swap/swapoff.service.j2", **names),
                    validate="systemd-analyze verify {path}"),
        ManagedFile(unit_path(REAPER_SERVICE), render_template(
                        "swap/training-reaper.service.j2", sandbox=sandbox((), ""), **names),
                    validate="systemd-analyze verify {path}"),
        ManagedFile(unit_path(REAPER_TIMER), render_template("swap/training-reaper.timer.j2", **names),
                    validate="systemd-analyze verify {path}"),
        ManagedFile(dropin_path(TRAINING_TARGET, "50-sparkguard-swap.conf"),
                    render_template("swap/training-dropin.conf.j2", **names)),
        ManagedFile(SYSCTL_FILE, render_template("swap/sysctl.conf.j2", swappiness=settings.swappiness),
                    validate=f"{SYSCTL_CHECK} {{path}}"),
    )
    if off:
        edit = FileEdit("/etc/fstab", *DISABLE, f"comment out swap lines with '{MARKER.strip()}'",
                        validate="findmnt --verify --tab-file {path}", generator_input=True)
        now = Ensure("no swap active now", check=f"{TOGGLE} none-active",
                     fix=f"{TOGGLE} off --reserve-percent {int(reserve)}")
    else:
        edit = FileEdit("/etc/fstab", *ENABLE, f"restore swap lines marked '{MARKER.strip()}'",
                        validate="findmnt --verify --tab-file {path}", generator_input=True)
        now = Ensure("fstab swap active now (unless in training mode)",
                     check=f"{TOGGLE} fstab-active --training-target {TRAINING_TARGET}", fix=f"{TOGGLE} on")
    return DesiredState(
        role="swap",
        directories=(Directory(RUNS_DIR),),
        files=files,
        edits=(edit,),
        services=tuple(Service(unit, enabled=None, running=None, masked=off) for unit in BOOT_SWAP_UNITS),
        sysctls={"vm.swappiness": str(settings.swappiness)},
        ensures=(now,),
    )
