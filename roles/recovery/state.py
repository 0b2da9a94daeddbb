"""Desired state of role ``recovery``.

Pure: nothing here depends on the live node (render == apply). What does depend
on it (hardware watchdog or softdog, a container, cgroup v1 or v2) is decided on
the node by an ``Ensure`` or stays inert, and ``sparkguard audit`` reports it.
"""

from __future__ import annotations

from typing import Any

from sparkguard.layout import LIB_DIR, STATE_DIR, TEXTFILE_DIR, dropin_path, unit_path
from sparkguard.role import RoleContext, shipped_program
from sparkguard.state import DesiredState, Directory, Ensure, ManagedFile, Service
from sparkguard.templating import render_template, sandbox

from ..base.interface import SYSCTL_CHECK
from .settings import RecoverySettings

WATCHDOG_CONF = "/etc/systemd/system.conf.d/50-sparkguard-watchdog.conf"
SOFTDOG_CONF = "/etc/modules-load.d/sparkguard-softdog.conf"
JOURNALD_CONF = "/etc/systemd/journald.conf.d/50-sparkguard.conf"
JOURNAL_DIR = "/var/log/journal"
SSH_DROPIN = dropin_path("ssh.service", "50-sparkguard-memory.conf")
JOURNALD_DROPIN = dropin_path("systemd-journald.service", "50-sparkguard-memory.conf")
SLICE_DROPIN = dropin_path("system.slice", "50-sparkguard-memory.conf")
SYSCTL_FILE = "/etc/sysctl.d/60-sparkguard-recovery.conf"
BOOT_REPORT = f"{LIB_DIR}/boot-report"
BOOT_REPORT_UNIT = "sparkguard-boot-report.service"
BOOT_MARKER = f"{STATE_DIR}/boot-in-progress"
BOOT_VERDICT = "/run/sparkguard/boot-verdict"
BOOT_REPORT_SOURCE = shipped_program(__file__, "boot-report.sh")
LAST_UNCLEAN = f"{STATE_DIR}/last-unclean-boot.txt"
BOOT_TEXTFILE = f"{TEXTFILE_DIR}/sparkguard_boot.prom"
MANAGER = "org.freedesktop.systemd1 /org/freedesktop/systemd1 org.freedesktop.systemd1.Manager"


def manager_property(name: str) -> str:
    """A PID 1 property as plain microseconds (``t 60000000``), independent of systemctl's formatting."""
    return f"busctl get-property {MANAGER} {name}"


def watchdog_usec_check(runtime_s: int, reboot_s: int) -> str:
    return (f"[ \"$({manager_property('RuntimeWatchdogUSec')})\" = 't {runtime_s * 1_000_000}' ] && "
            f"[ \"$({manager_property('RebootWatchdogUSec')})\" = 't {reboot_s * 1_000_000}' ]")


# softdog only where there is no watchdog at all; in a container the kernel (and its watchdog) is the host's.
SOFTDOG_CHECK = (f"systemd-detect-virt --container -q || {{ [ -e /dev/watchdog ] && "
                 f"{{ [ ! -d /sys/module/softdog ] || grep -qx softdog {SOFTDOG_CONF}; }}; }}")
SOFTDOG_FIX = (f"modprobe softdog && mkdir -p /etc/modules-load.d && "
               f"printf '# Managed by sparkguard (role recovery): this node has no hardware watchdog.\\nsoftdog\\n'"
               f" > {SOFTDOG_CONF}")


def sysctls(settings: RecoverySettings) -> dict[str, str]:
    s = settings.sysctl
    if not s.enabled:
        return {}
    values = {}
    if s.sysrq is not None:
        values["kernel.sysrq"] = str(s.sysrq)
    if s.panic_reboot_s:
        values["kernel.panic"] = str(s.panic_reboot_s)
    if s.panic_on_oops:
        values["kernel.panic_on_oops"] = "1"
    if s.hung_task_panic:
        values["kernel.hung_task_panic"] = "1"
    return values



def boot_report_args(report: Any) -> str:
    """What the unit passes to boot-report after start|stop (``report``: RecoverySettings.boot_report)."""
    return (f"--marker {BOOT_MARKER} --verdict {BOOT_VERDICT} --textfile {BOOT_TEXTFILE} --last {LAST_UNCLEAN} "
            f"--earlyoom-lines {int(report.earlyoom_lines)} --memory-samples {int(report.memory_samples)}")

def desired_state(ctx: RoleContext) -> DesiredState:
    settings: RecoverySettings = ctx.settings("recovery")
    files: list[ManagedFile] = []
    services: list[Service] = []
    ensures: list[Ensure] = []
    directories: list[Directory] = []

    wd = settings.watchdog
    if wd.enabled:
        files.append(ManagedFile(WATCHDOG_CONF, render_template(
            "recovery/watchdog.conf.j2", runtime_s=wd.runtime_s, reboot_s=wd.reboot_s)))
        if wd.softdog:
            ensures.append(Ensure(
                "softdog loaded and persisted when no hardware /dev/watchdog (skipped in a container)",
                check=SOFTDOG_CHECK, fix=SOFTDOG_FIX))
        # system.conf is read only at (re-)exec: re-exec PID 1 when its live values differ from the file.
        ensures.append(Ensure(
            f"systemd watchdog live (RuntimeWatchdogSec={wd.runtime_s}s, RebootWatchdogSec={wd.reboot_s}s)",
            check=watchdog_usec_check(wd.runtime_s, wd.reboot_s), fix="systemctl daemon-reexec"))

    journal = settings.journal
    if journal.enabled:
        directories.append(Directory(JOURNAL_DIR, mode=None, owner=None, group=None))
        files.append(ManagedFile(JOURNALD_CONF, render_template(
            "recovery/journald.conf.j2", max_use_mib=journal.max_use_mib)))
        services.append(Service("systemd-journald.service", enabled=None, running=True,
                                restart_on=(JOURNALD_CONF,)))

    mp = settings.memory_protection
    if mp.enabled:
        for path, unit, min_mib, low_mib in (
            (SSH_DROPIN, "ssh.service", mp.ssh_min_mib, mp.ssh_low_mib),
            (JOURNALD_DROPIN, "systemd-journald.service", mp.journald_min_mib, mp.journald_low_mib),
            # A child is protected only up to what its parent slice is protected.
            (SLICE_DROPIN, "system.slice", mp.ssh_min_mib + mp.journald_min_mib,
             mp.ssh_low_mib + mp.journald_low_mib),
        ):
            files.append(ManagedFile(path, render_template(
                "recovery/memory.conf.j2", unit=unit, min_mib=min_mib, low_mib=low_mib,
                section="Slice" if unit.endswith(".slice") else "Service")))

    values = sysctls(settings)
    if values:
        files.append(ManagedFile(SYSCTL_FILE, render_template("recovery/sysctl.conf.j2", sysctls=values,
                                                              settings=settings.sysctl),
                                 validate=f"{SYSCTL_CHECK} {{path}}"))

    report = settings.boot_report
    if report.enabled:
        names = {"marker": BOOT_MARKER, "verdict": BOOT_VERDICT, "textfile": BOOT_TEXTFILE,
                 "last_unclean": LAST_UNCLEAN, "earlyoom_lines": report.earlyoom_lines,
                 "memory_samples": report.memory_samples, "script": BOOT_REPORT}
        names["args"] = boot_report_args(report)
        files.append(ManagedFile(BOOT_REPORT, BOOT_REPORT_SOURCE.read_text(), mode="0755", validate="sh -n {path}"))
        files.append(ManagedFile(unit_path(BOOT_REPORT_UNIT), render_template(
            "recovery/boot-report.service.j2", **names,
            sandbox=sandbox((STATE_DIR, "/run/sparkguard", TEXTFILE_DIR), "CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH")),
            validate="systemd-analyze verify {path}"))
        services.append(Service(BOOT_REPORT_UNIT, restart_on=(BOOT_REPORT, unit_path(BOOT_REPORT_UNIT))))

    return DesiredState(
        role="recovery",
        directories=tuple(directories),
        files=tuple(files),
        services=tuple(services),
        sysctls=values,
        ensures=tuple(ensures),
    )
