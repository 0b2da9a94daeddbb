"""How `sparkguard audit` judges role recovery: the watchdog is armed on a device, the journal survives a
reboot, sshd's memory is protected, sshd is out of the OOM trap (its listener spared, its sessions killable),
and this boot has a verdict on how the previous one ended."""

from __future__ import annotations

from sparkguard.audit.checks import AuditView, Check, q, usec
from sparkguard.hostconfig import HostConfig

from .state import BOOT_VERDICT

SSH_CGROUP = "/sys/fs/cgroup/system.slice/ssh.service"
# The OOM trap around sshd: its listener spared (-1000), the sessions it starts (and every job run from
# them) killable, and no OOMScoreAdjust=-1000 on ssh.service that each session would inherit.
SSHD_PROBE = r"""lpid=$(systemctl show -p MainPID --value ssh.service 2>/dev/null)
if [ -z "$lpid" ] || [ "$lpid" = 0 ]; then lpid=$(pgrep -o -x sshd 2>/dev/null); fi
r ssh_listener_pid "$lpid"
r ssh_listener_adj "$(cat /proc/$lpid/oom_score_adj 2>/dev/null)"
r ssh_unit_adj "$(systemctl show -p OOMScoreAdjust --value ssh.service 2>/dev/null)"
r session_adj "$(cat /proc/$$/oom_score_adj)"
r can_lower "$(sh -c 'echo -1 > /proc/self/oom_score_adj' 2>/dev/null && echo 1 || echo 0)"
"""


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
        SSHD_PROBE,
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


def _sshd(rt: dict[str, str]) -> list[Check]:
    """The listener is spared, sessions (and the jobs started in them) are not."""
    found: list[Check] = []

    def add(name: str, ok: bool, expected: str, actual: str) -> None:
        found.append(Check(name, ok, expected, actual))

    listener = rt.get("ssh_listener_adj", "")
    can_lower = rt.get("can_lower") == "1"
    if not rt.get("ssh_listener_pid"):
        add("sshd: listener oom_score_adj", False, "-1000 (OpenSSH sets it)", "no sshd listener found")
    elif listener == "-1000":
        add("sshd: listener oom_score_adj", True, "-1000 (OpenSSH sets it)", "-1000")
    else:
        add("sshd: listener oom_score_adj", not can_lower, "-1000 (OpenSSH sets it)",
            f"{listener}: not lowered because the kernel refused (no CAP_SYS_RESOURCE on this node)"
            if not can_lower else f"{listener}, although this node can lower it")
    session = rt.get("session_adj", "")
    add("sshd: fresh session oom_score_adj", session not in ("-1000", ""), "> -1000 (killable)", session or "?")
    unit_adj = rt.get("ssh_unit_adj", "")
    add("sshd: ssh.service OOMScoreAdjust", unit_adj != "-1000", "not -1000 (every session would inherit it)",
        unit_adj or "unset")
    return found


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
    return found + _sshd(rt)
