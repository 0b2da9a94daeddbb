"""Defaults of role ``recovery``: every variable, in one place.

The incident's worst lesson: a hung node needed someone to walk over and
power-cycle it. Each block here can be switched off on its own; its risk is in
docs/roles/recovery.md.
"""

from __future__ import annotations

from sparkguard.settings import Settings, setting


class WatchdogSettings(Settings):
    """systemd's runtime watchdog: PID 1 starved for too long means the node reboots by itself."""

    enabled: bool = setting(
        True, "Write RuntimeWatchdogSec/RebootWatchdogSec to /etc/systemd/system.conf.d/ and re-exec systemd.")
    runtime_s: int = setting(
        60, "RuntimeWatchdogSec: systemd pings the watchdog every half of this; a userspace stall longer than"
        " this reboots the node.", unit="s", ge=10, le=600)
    reboot_s: int = setting(
        600, "RebootWatchdogSec: a reboot that has not finished after this long is forced.", unit="s",
        ge=30, le=3600)
    softdog: bool = setting(
        True, "Load the softdog module (now and at boot, /etc/modules-load.d/) when the node has no hardware"
        " /dev/watchdog. Skipped in a container (the kernel is the host's).")


class JournalSettings(Settings):
    """A journal on disk, so the earlyoom kill and the last minutes before a hang survive the reboot."""

    enabled: bool = setting(True, "journald Storage=persistent with a size cap (drop-in in journald.conf.d/).")
    max_use_mib: int = setting(
        2048, "SystemMaxUse: the most disk the persistent journal may take.", unit="MiB", ge=64, le=65536)


class MemoryProtectionSettings(Settings):
    """cgroup v2 memory protection for sshd and journald: they keep their pages while the node is squeezed."""

    enabled: bool = setting(
        True, "MemoryMin=/MemoryLow= drop-ins for ssh.service, systemd-journald.service and system.slice"
              " (effective on cgroup v2 only; inert on v1). Never OOMScoreAdjust=-1000 on ssh.service.")
    ssh_min_mib: int = setting(32, "MemoryMin of ssh.service (hard protection).", unit="MiB", ge=0, le=4096)
    ssh_low_mib: int = setting(128, "MemoryLow of ssh.service (best-effort protection).", unit="MiB",
                               ge=0, le=4096)
    journald_min_mib: int = setting(64, "MemoryMin of systemd-journald.service.", unit="MiB", ge=0, le=4096)
    journald_low_mib: int = setting(256, "MemoryLow of systemd-journald.service.", unit="MiB", ge=0, le=4096)


class SysctlSettings(Settings):
    """Magic SysRq policy and opt-in automatic reboot on panic, oops and hung tasks."""

    enabled: bool = setting(True, "Write /etc/sysctl.d/60-sparkguard-recovery.conf (validated) and apply it.")
    sysrq: int | None = setting(
        240, "kernel.sysrq bitmask for the keyboard/serial console (BMC): 16 sync + 32 remount read-only +"
        " 64 signalling (incl. 'f': one kernel OOM kill, which picks the training job first, the last resort"
        " before a power cycle when a node thrashes and SSH no longer answers) + 128 reboot = 240."
        " 1 = everything (adds debug dumps, nice-all and keyboard control). null = not"
        " managed (a kernel built without CONFIG_MAGIC_SYSRQ has no kernel.sysrq; the validator refuses it).",
        ge=0, le=511)
    panic_reboot_s: int = setting(
        0, "kernel.panic: reboot this many seconds after a kernel panic. 0 = not managed (the kernel's"
        " default 0 waits forever on the panic screen).", unit="s", ge=0, le=3600)
    panic_on_oops: bool = setting(
        False, "kernel.panic_on_oops = 1: an oops panics (and, with panic_reboot_s, reboots). Needs panic_reboot_s.")
    hung_task_panic: bool = setting(
        False, "kernel.hung_task_panic = 1: a task stuck in D state past hung_task_timeout_secs panics."
        " Needs panic_reboot_s.")


class BootReportSettings(Settings):
    """A short report on the first boot after an unclean shutdown: journal + textfile metric."""

    enabled: bool = setting(
        True, "Install sparkguard-boot-report.service: a marker made at boot and removed at clean shutdown;"
        " found at boot = the previous boot ended uncleanly.")
    earlyoom_lines: int = setting(20, "How many of the previous boot's last earlyoom lines to report.", ge=0, le=500)
    memory_samples: int = setting(
        10, "How many of the previous boot's last MemAvailable samples (earlyoom's 'mem avail' lines) to report.",
        ge=0, le=500)


class RecoverySettings(Settings):
    """A hung node comes back by itself, and the evidence survives the reboot."""

    enabled: bool = setting(True, "Apply the recovery role (each block below can also be switched off).")
    watchdog: WatchdogSettings = setting(lambda: WatchdogSettings(), "Runtime watchdog.")
    journal: JournalSettings = setting(lambda: JournalSettings(), "Persistent journal.")
    memory_protection: MemoryProtectionSettings = setting(
        lambda: MemoryProtectionSettings(), "Memory protection for sshd and journald.")
    sysctl: SysctlSettings = setting(lambda: SysctlSettings(), "SysRq and panic sysctls.")
    boot_report: BootReportSettings = setting(lambda: BootReportSettings(), "Unclean-boot report.")
