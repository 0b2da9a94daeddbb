"""How `sparkguard audit` judges role recovery: the watchdog is armed on a device, the journal survives a
reboot, sshd's memory is protected, and this boot has a verdict on how the previous one ended."""

from __future__ import annotations

from sparkguard.auditing import AuditView, Check, q, usec
from sparkguard.hostconfig import HostConfig

from .state import BOOT_VERDICT

SSH_CGROUP = "/sys/fs/cgroup/system.slice/ssh.service"


def probe(config: HostConfig) -> list[str]:
    return [
        "r wd_runtime \"$(mp RuntimeWatchdogUSec)\"",
        "r wd_reboot \"$(mp RebootWatchdogUSec)\"",
        "r wd_device \"$(ls /dev/watchdog0 2>/dev/null)\"",
        "r wd_identity \"$(cat /sys/class/watchdog/watchdog0/identity 2>/dev/null)\"",
        "r wd_state \"$(cat /sys/class/watchdog/watchdog0/state 2>/dev/null)\"",
        "r softdog \"$([ -d /sys/module/softdog ] && echo loaded)\"",
        "r journal_file \"$(ls /var/log/journal/*/system.journal 2>/dev/null | head -n1)\"",
        "r journal_runtime \"$(ls /run/log/journal/*/system.journal 2>/dev/null | head -n1)\"",
        f"r ssh_memory \"$(cat {SSH_CGROUP}/memory.min {SSH_CGROUP}/memory.low 2>/dev/null)\"",
        f"r boot_verdict \"$(cat {q(BOOT_VERDICT)} 2>/dev/null)\"",
    ]


def _watchdog(view: AuditView) -> Check:
    rt, settings = view.runtime, view.config.recovery.watchdog
    runtime = usec(rt.get("wd_runtime", ""))
    want = f"RuntimeWatchdogSec={settings.runtime_s}s"
    detail = f"RuntimeWatchdogSec={runtime // 1_000_000}s"
    armed = runtime == settings.runtime_s * 1_000_000
    if view.info.container:
        return Check("recovery: watchdog armed", armed, want,
                     f"{detail}; container: no watchdog device, the host's kernel owns it (softdog not loaded)")
    device = rt.get("wd_device", "")
    name = rt.get("wd_identity") or ("softdog" if rt.get("softdog") else "")
    return Check("recovery: watchdog armed", armed and bool(device), f"{want} on a watchdog device",
                 f"{detail}, device {device or 'none'} {name} {rt.get('wd_state', '')}".strip())


def _memory(view: AuditView) -> Check:
    seen = view.runtime.get("ssh_memory", "")
    if not view.info.cgroup2:
        return Check("recovery: sshd memory protection", True, "cgroup v2 memory.min/low",
                     "cgroup v1: MemoryMin/MemoryLow are inert here (drop-ins installed for a v2 boot)")
    want = str(view.config.recovery.memory_protection.ssh_min_mib * 2**20)
    return Check("recovery: sshd memory protection", seen.split()[:1] == [want], f"memory.min {want}",
                 f"memory.min/low {seen or 'unreadable'}")


VERDICTS = {"0": "previous boot ended cleanly",
            "1": "previous boot ended UNCLEANLY (journalctl -t sparkguard-boot-report -b)"}


def checks(view: AuditView) -> list[Check]:
    rec, rt = view.config.recovery, view.runtime
    found = []
    if rec.watchdog.enabled:
        found.append(_watchdog(view))
    if rec.journal.enabled:
        path = rt.get("journal_file", "")
        found.append(Check("recovery: journal persistent", bool(path), "system.journal under /var/log/journal",
                           path or f"volatile only ({rt.get('journal_runtime') or 'no journal file found'})"))
    if rec.memory_protection.enabled:
        found.append(_memory(view))
    if rec.boot_report.enabled:
        verdict = rt.get("boot_verdict", "")
        found.append(Check("recovery: boot report", verdict in VERDICTS, "verdict for this boot",
                           VERDICTS.get(verdict, "no verdict (unit never ran this boot)")))
    return found
