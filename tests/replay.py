"""The incident replay: a 'CUDA trainer' whose memory no cgroup and no RSS sees.

Shared by tests/sandbox/test_incident_replay.py and bench/earlyoom-replay.
On a sandbox node with role earlyoom applied:

- a bystander with a large anonymous RSS and comm ``python3`` (a vLLM API server
  stand-in) runs;
- ``sparkguard-uma-hog`` (comm ``pt_main_thread``) is started the way operators
  start training, through ``sparkguard-oom-first``, and is placed by the host into
  a memory cgroup with a small limit (what ``docker run --memory`` does) before it
  allocates hugetlb pages in steps: invisible to VmRSS and to the cgroup, but
  MemAvailable falls, as with GPU driver memory on a DGX Spark;
- earlyoom must SIGTERM the hog, spare everything else, and count the kill.

Safety: the hugetlb pages come out of the host's real memory. The SIGTERM line
is set relative to the host's current MemAvailable so at most ~2 GiB is taken,
the host's nr_overcommit_hugepages is restored and every process and cgroup the
replay made is removed, even on failure.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HOG_UNIT = "sg-replay-hog"
BYSTANDER_UNIT = "sg-replay-bystander"
HOG_REPORT = "/run/sg-replay-hog.jsonl"
GO_FIFO = "/run/sg-replay-go"
HOG_PIDFILE = "/run/sg-replay-hog.pid"
MIB = 2**20
GIB = 2**30


def meminfo_kib(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


@dataclass
class ReplayPlan:
    """Lines relative to what is free now: SIGTERM after the hog takes ``term_after`` bytes."""

    mem_total_kib: int
    mem_available_kib: int
    bystander_mib: int = 256
    term_after_bytes: int = int(1.25 * GIB)
    kill_after_bytes: int = int(1.75 * GIB)
    hog_cap_mib: int = 2304

    def percent(self, taken: int) -> float:
        line_kib = self.mem_available_kib - self.bystander_mib * 1024 - taken // 1024
        return round(100.0 * line_kib / self.mem_total_kib, 1)

    @property
    def term_percent(self) -> float:
        return self.percent(self.term_after_bytes)

    @property
    def kill_percent(self) -> float:
        return self.percent(self.kill_after_bytes)

    @property
    def term_line_kib(self) -> int:
        return int(self.term_percent * self.mem_total_kib / 100)

    @classmethod
    def from_host(cls) -> "ReplayPlan":
        return cls(meminfo_kib("MemTotal"), meminfo_kib("MemAvailable"))


@dataclass
class ReplayResult:
    hog_exit: str
    hog_events: list[dict]
    term_line_kib: int
    cgroup_peak_bytes: int
    cgroup_limit_bytes: int
    bystander_alive: bool
    sshd_alive: bool
    earlyoom_alive: bool
    logins_during: int
    kill_counter: str
    earlyoom_log: str
    notes: list[str] = field(default_factory=list)

    @property
    def got_sigterm(self) -> bool:
        return any(e.get("event") == "sigterm" for e in self.hog_events)

    @property
    def crossing_time(self) -> float | None:
        for event in self.hog_events:
            if event.get("mem_available_kib", 1 << 62) <= self.term_line_kib:
                return event["t"]
        return None

    @property
    def signal_time(self) -> float | None:
        return next((e["t"] for e in self.hog_events if e.get("event") == "sigterm"), None)

    @property
    def reaction_s(self) -> float | None:
        if self.crossing_time is None or self.signal_time is None:
            return None
        return self.signal_time - self.crossing_time

    @property
    def lowest_below_line_kib(self) -> int | None:
        """How far MemAvailable fell below the SIGTERM line before the signal."""
        before = [e["mem_available_kib"] for e in self.hog_events
                  if "mem_available_kib" in e and (self.signal_time is None or e["t"] <= self.signal_time)]
        return self.term_line_kib - min(before) if before else None


HUGEPAGE_LOCK = "/run/sparkguard-hugepages.lock"


@contextmanager
def hugepage_budget(pages: int):
    """Let the host hand out up to ``pages`` surplus 2 MiB huge pages; restore afterwards.

    The knob is host-wide, so concurrent replays (tests, benchmarks) take a lock
    and each restores exactly the value it found.
    """
    import fcntl

    knob = Path("/proc/sys/vm/nr_overcommit_hugepages")
    with open(HUGEPAGE_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        original = knob.read_text().strip()
        knob.write_text(str(pages))
        try:
            yield
        finally:
            knob.write_text(original)


@contextmanager
def host_memory_cgroup(name: str, limit_bytes: int):
    """A memory cgroup made by the host (as dockerd would for --memory), removed afterwards."""
    v2 = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    base = Path("/sys/fs/cgroup") if v2 else Path("/sys/fs/cgroup/memory")
    group = base / name
    group.mkdir(exist_ok=True)
    (group / ("memory.max" if v2 else "memory.limit_in_bytes")).write_text(str(limit_bytes))
    try:
        yield group
    finally:
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.2)


def cgroup_peak(group: Path) -> int:
    for name in ("memory.max_usage_in_bytes", "memory.peak"):
        if (group / name).exists():
            return int((group / name).read_text())
    return -1


def _status_field(pid: str, key: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip()
    return ""


def _descends_from(pid: str, ancestor: int) -> bool:
    while pid not in ("0", "1", ""):
        if pid == str(ancestor):
            return True
        pid = _status_field(pid, "PPid")
    return False


def host_pid_of(container_pid: int, nspawn_pid: int) -> int:
    """The host PID of a node's process: NSpid maps it, ancestry picks the right node."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ids = _status_field(proc.name, "NSpid").split()
            if len(ids) >= 2 and ids[-1] == str(container_pid) and _descends_from(proc.name, nspawn_pid):
                return int(proc.name)
        except OSError:
            continue
    raise LookupError(f"no host process for container pid {container_pid} under nspawn pid {nspawn_pid}")


def install_tools(handle, node: str) -> None:
    for tool in ("sparkguard-uma-hog", "sparkguard-anon-hog"):
        source = (REPO / "tools" / tool).read_text()
        target = Path(handle.node(node).rootfs) / "usr/local/bin" / tool
        target.write_text(source)
        target.chmod(0o755)


def run_replay(handle, node: str, plan: ReplayPlan, timeout_s: float = 120, oom_first: bool = True) -> ReplayResult:
    """Drive one replay on a node whose earlyoom already runs with ``plan``'s lines.

    ``oom_first=False`` starts the hog without sparkguard-oom-first, as an
    unmarked training job would run.
    """
    launcher = "sparkguard-oom-first -- " if oom_first else ""
    install_tools(handle, node)
    ssh = lambda cmd: handle.ssh(node, cmd)  # noqa: E731 - every call is a NEW SSH login
    cleanup = (f"systemctl stop {HOG_UNIT} {BYSTANDER_UNIT} 2>/dev/null; "
               f"systemctl reset-failed {HOG_UNIT} {BYSTANDER_UNIT} 2>/dev/null; "
               f"rm -f {HOG_REPORT} {GO_FIFO} {HOG_PIDFILE}; true")
    ssh(cleanup)
    limit = 256 * MIB
    with hugepage_budget(plan.hog_cap_mib // 2 + 64), host_memory_cgroup(f"sparkguard-replay-{os.getpid()}", limit) as group:
        try:
            rc, _, err = ssh(f"systemd-run --unit {BYSTANDER_UNIT} -q sparkguard-anon-hog --mib {plan.bystander_mib} "
                             f"--comm python3")
            assert rc == 0, err
            rc, _, err = ssh(
                # systemd-run expands $$ itself: $$$$ reaches sh as $$.
                f"mkfifo {GO_FIFO} && systemd-run --unit {HOG_UNIT} -q sh -c "
                f"'echo $$$$ > {HOG_PIDFILE}; read go < {GO_FIFO}; exec {launcher}sparkguard-uma-hog "
                f"--step-mib 32 --interval-s 0.2 --max-mib {plan.hog_cap_mib} --hold --sample-ms 50 "
                f"--report {HOG_REPORT}'")
            assert rc == 0, err
            container_pid = _wait_for_pidfile(ssh)
            host_pid = host_pid_of(container_pid, handle.node(node).pid)
            (group / "cgroup.procs").write_text(str(host_pid))
            time.sleep(1.0)  # let the bystander finish touching its pages before the hog starts
            ssh(f"echo go > {GO_FIFO}")
            logins = 0
            deadline = time.time() + timeout_s
            while time.time() < deadline:
                rc, out, _ = ssh(f"systemctl is-active {HOG_UNIT}")
                logins += 1
                if out.strip() not in ("active", "activating"):
                    break
                time.sleep(0.5)
            _, status, _ = ssh(f"systemctl show -p ExecMainCode -p ExecMainStatus --value {HOG_UNIT}")
            _, report, _ = ssh(f"cat {HOG_REPORT}")
            events = [json.loads(line) for line in report.splitlines() if line.strip()]
            _, bystander, _ = ssh(f"systemctl is-active {BYSTANDER_UNIT}")
            _, alive, _ = ssh("pgrep -x sshd >/dev/null && echo sshd; systemctl is-active earlyoom")
            time.sleep(2.0)  # the path unit collects the kill event
            _, counter, _ = ssh("cat /var/lib/prometheus/node-exporter/sparkguard_earlyoom.prom")
            _, log, _ = ssh("journalctl -u earlyoom --no-pager -n 30 -o cat; "
                            "journalctl -t sparkguard-earlyoom --no-pager -n 5 -o cat")
            return ReplayResult(
                hog_exit=" ".join(status.split()),
                hog_events=events,
                term_line_kib=plan.term_line_kib,
                cgroup_peak_bytes=cgroup_peak(group),
                cgroup_limit_bytes=limit,
                bystander_alive=bystander.strip() == "active",
                sshd_alive="sshd" in alive.split(),
                earlyoom_alive="active" in alive.split(),
                logins_during=logins,
                kill_counter=counter,
                earlyoom_log=log,
            )
        finally:
            ssh(cleanup)


def _wait_for_pidfile(ssh) -> int:
    for _ in range(50):
        rc, out, _ = ssh(f"cat {HOG_PIDFILE} 2>/dev/null")
        if rc == 0 and out.strip().isdigit():
            return int(out.strip())
        time.sleep(0.1)
    raise TimeoutError("the replay hog did not start")
