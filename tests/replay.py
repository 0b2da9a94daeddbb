"""The incident replay as a matrix: every launch path x every bystander at once.

Shared by tests/sandbox/test_incident_replay.py and bench/earlyoom-replay.
On a sandbox node with role earlyoom applied (GPU ranking agent on):

- bystanders run together in every cell: a vLLM stand-in started as its
  sparkguard-vllm@ unit would set it (serving's oom_score_adj, comm
  ``VLLM::EngineCor``, a larger RSS than the trainer's), a plain ``python3``
  notebook, and an open SSH session;
- the trainer is ``sparkguard-uma-hog``: it allocates hugetlb pages in steps,
  invisible to VmRSS and to any memory cgroup while MemAvailable falls, as GPU
  driver memory does on a DGX Spark. A stand-in ``nvidia-smi`` on the node
  reports each process's HugetlbPages as its ``used_memory`` (the output format
  of ``--query-compute-apps=pid,used_memory --format=csv,noheader,nounits``);
- it is started by one of the launch paths (LAUNCHES): sparkguard-train,
  sparkguard-train under sudo from the ops account, sparkguard-oom-first, plain
  python3 placed by the host in a small memory cgroup (what docker run --memory
  does), an unknown comm (llama-server);
- earlyoom must SIGTERM the trainer first, spare every bystander, sshd and a
  fresh login, and count the kill.

Safety: the hugetlb pages come out of the host's real memory. The SIGTERM line
is set relative to the host's current MemAvailable so at most ~2 GiB is taken,
the host's nr_overcommit_hugepages is restored and every process and cgroup the
replay made is removed, even on failure.
"""

from __future__ import annotations

import json
import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HOG_UNIT = "sg-replay-hog"
BYSTANDER_UNIT = "sg-replay-bystander"     # the python3 notebook
VLLM_UNIT = "sg-replay-vllm"               # the vLLM engine stand-in
HOG_REPORT = "/tmp/sg-replay-hog.jsonl"    # /tmp: the sudo path's trainer runs as ops
SSH_SESSION_END = "/run/sg-replay-end"
NVIDIA_SMI = "/usr/local/bin/nvidia-smi"
DOCKER = "/usr/local/bin/docker"             # tools/fake-docker: docker's PID-1 signal semantics
# STAND-IN for nvidia-smi (no GPU here): each process's hugetlb memory, the replay's "driver
# memory", reported as its GPU memory in the format of
# `nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits` (MiB).
FAKE_NVIDIA_SMI = """#!/bin/sh
# STAND-IN installed by sparkguard's incident replay (tests/replay.py); not NVIDIA's nvidia-smi.
# One grep over every process (a process gone meanwhile is skipped), one awk: a fork per process took ~5 s
# per call on a TCG guest, and the GPU ranking agent calls it every pass.
# SG_PROC_ROOT: a fake /proc for its unit test (tests/unit/test_replay_stand_ins.py).
grep -H '^HugetlbPages:' "${SG_PROC_ROOT:-/proc}"/[0-9]*/status 2>/dev/null |
  awk -F: '{n = split($1, part, "/"); kib = $3 + 0} kib > 0 {printf "%s, %d\\n", part[n - 1], kib / 1024}'
exit 0
"""
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
    bystander_mib: int = 256 + 384     # notebook + vLLM stand-in
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

    @property
    def kill_line_kib(self) -> int:
        return int(self.kill_percent * self.mem_total_kib / 100)

    @classmethod
    def from_host(cls) -> ReplayPlan:
        return cls(meminfo_kib("MemTotal"), meminfo_kib("MemAvailable"))


DEVICE = "/dev/nvidia-uvm"
# STAND-IN for the compute device CUDA opens at init (a regular file on the node's /dev tmpfs): the hog opens
# it before its first allocation and its forked workers inherit the descriptor, as with the real driver.


@dataclass(frozen=True)
class Launch:
    """One way an operator starts training, and the job's shape; ``{hog}`` is the trainer's command line."""

    name: str
    command: str
    comm: str = "python3"            # current PyTorch keeps the interpreter's comm
    host_cgroup: bool = False        # placed by the host into a small memory cgroup before it allocates
    marked: bool = False             # oom_score_adj 1000 from sparkguard; else found by its GPU memory
    record: bool = False             # sparkguard-train writes a record that must say killed_by_earlyoom
    docker: bool = False             # in a container (tools/fake-docker): its own PID namespace
    shape: str = ""                  # extra hog options: the job's process tree (memfd helpers, torchrun)
    fast: bool = False               # takes all its memory within one second of starting
    no_nvidia_smi: bool = False      # the node has no nvidia-smi: the agent sees only device descriptors
    beside_ollama: bool = False      # an ollama.service holding more GPU memory than the trainer runs too

    @property
    def tree(self) -> bool:
        return "--helpers" in self.shape or "--torchrun" in self.shape


# Workers that keep only the memfd (the driver memory) and leave 5 s after their parent, as PyTorch's do.
HELPERS = "--memfd --helpers 2 --helper-watch-s 5 --helper-linger-s 1"
TORCHRUN = "--torchrun --memfd --helpers 2 --helper-comm pt_data_worker --helper-watch-s 5"

LAUNCHES = {
    launch.name: launch for launch in (
        Launch("sparkguard-train", "sparkguard-train --name replay -- {hog}", marked=True, record=True),
        Launch("sudo sparkguard-train (ops)", "runuser -u ops -- sudo -n sparkguard-train --name replay -- {hog}",
               marked=True, record=True),
        Launch("sparkguard-train --docker", "sparkguard-train --name replay --docker -- docker run --gpus all img {hog}",
               marked=True, record=True, docker=True),
        Launch("sparkguard-oom-first", "sparkguard-oom-first -- {hog}", marked=True),
        Launch("python3 in a --memory cgroup", "{hog}", host_cgroup=True),
        Launch("unknown comm (a JAX job)", "{hog}", comm="jaxtrain"),
    )
}
# The job shapes of issue 25, each against every bystander: real jobs are process trees, start fast,
# run beside other servers, on nodes where nvidia-smi may be missing.
SHAPES = {
    launch.name: launch for launch in (
        Launch("python3 + memfd workers", "{hog}", shape=HELPERS),
        Launch("torchrun (pt_elastic, rank, pt_data_worker)", "{hog}", shape=TORCHRUN),
        Launch("sparkguard-train torchrun", "sparkguard-train --name replay -- {hog}", shape=TORCHRUN, marked=True,
               record=True),
        Launch("fast start (all within 1 s)", "{hog}", shape=HELPERS, fast=True),
        Launch("beside ollama.service holding more", "{hog}", beside_ollama=True),
        Launch("python3, no nvidia-smi", "{hog}", no_nvidia_smi=True),
        Launch("memfd workers, no nvidia-smi", "{hog}", shape=HELPERS, no_nvidia_smi=True),
    )
}
ALL_LAUNCHES = {**LAUNCHES, **SHAPES}
OLLAMA_UNIT = "ollama"                   # a transient ollama.service, comm ollama, in /system.slice
OLLAMA_MAX_MIB = 1024                    # the most the ollama stand-in takes (its huge pages are budgeted for it)
TRAINER_SHARE_MIB = 320                  # beside ollama: what the trainer holds when it crosses the line


@dataclass
class ReplayResult:
    launch: str
    hog_exit: str
    hog_events: list[dict]
    term_line_kib: int
    cgroup_peak_bytes: int
    cgroup_limit_bytes: int
    bystander_alive: bool
    vllm_alive: bool
    ssh_session_alive: bool
    sshd_alive: bool
    earlyoom_alive: bool
    fresh_login: bool
    logins_during: int
    kills_before: int
    kills_after: int
    kill_counter: str
    earlyoom_log: str
    first_victim_pid: int | None
    hog_pid: int | None
    hog_adj: str
    record: dict | None
    job_pids: list[int] = field(default_factory=list)
    job_gone_s: float | None = None          # first signal -> every process of the job gone
    release_s: float | None = None           # first signal -> the job's huge pages back (host's HugePages_Surp)
    host_memory: str = ""                    # HostSampler.explain: the host's MemAvailable over the cell
    ollama_alive: bool = True
    ollama_mib: int = 0                      # what the ollama stand-in held (0: no ollama in this cell)
    notes: list[str] = field(default_factory=list)

    @property
    def trainer_killed_first(self) -> bool:
        """The guard's first signal went to the job: the trainer, one of its workers or its launcher."""
        if self.first_victim_pid is None:
            return False
        return self.first_victim_pid == self.hog_pid or self.first_victim_pid in self.job_pids

    @property
    def bystanders_alive(self) -> bool:
        return all((self.bystander_alive, self.vllm_alive, self.ssh_session_alive, self.sshd_alive,
                    self.earlyoom_alive, self.fresh_login, self.ollama_alive))

    @property
    def held_back(self) -> int:
        """How often nohang's action refused a next victim while the job's memory was still coming back."""
        return self.earlyoom_log.count("was still coming back; not signalled")

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
    root = Path(handle.node(node).rootfs)
    for tool in ("sparkguard-uma-hog", "sparkguard-anon-hog"):
        target = root / "usr/local/bin" / tool
        target.write_text((REPO / "tools" / tool).read_text())
        target.chmod(0o755)
    target = root / NVIDIA_SMI.lstrip("/")
    target.write_text(FAKE_NVIDIA_SMI)
    target.chmod(0o755)
    target = root / DOCKER.lstrip("/")
    target.write_text((REPO / "tools" / "fake-docker").read_text())
    target.chmod(0o755)


def remove_tools(handle, node: str) -> None:
    for path in (NVIDIA_SMI, DOCKER):
        (Path(handle.node(node).rootfs) / path.lstrip("/")).unlink(missing_ok=True)


def _kills_total(counter: str) -> int:
    for line in counter.splitlines():
        if line.startswith("sparkguard_earlyoom_kills_all_total "):
            return int(float(line.split()[1]))
    return 0


def _counter_after(ssh, kills_before: int, signalled: bool) -> str:
    """The kills counter once the path unit has collected the kill: polled until it moves (at most 10 s) when the
    guard signalled someone; else read after 2 s, the time a collection would have taken, so a kill nobody saw
    signalled is still counted in what the test asserts."""
    deadline = time.time() + (10.0 if signalled else 2.0)
    while True:
        _, counter, _ = ssh("cat /var/lib/prometheus/node-exporter/sparkguard_earlyoom.prom")
        if (signalled and _kills_total(counter) > kills_before) or time.time() >= deadline:
            return counter
        time.sleep(0.25)


def _first_victim(log: str) -> int | None:
    """The first victim's PID in the guard's journal: earlyoom's own line, or nohang's action script's."""
    for line in log.splitlines():
        if "sending SIG" in line and " to process " in line:
            return int(line.split(" to process ", 1)[1].split()[0])
        if "sparkguard: nohang sent SIG" in line and "(pid " in line:
            return int(line.split("(pid ", 1)[1].split(",")[0].split(")")[0])
    return None


# The largest line nohang accepts is 50 % of MemTotal (it refuses a higher soft_threshold_min_mem).
NOHANG_MAX_LINE_PERCENT = 50


@contextmanager
def host_ballast(target_available_kib: int, cap_mib: int):
    """Bring the host's MemAvailable down to about ``target_available_kib`` with a HOST process.

    For guards that refuse lines near a mostly idle host's MemAvailable (nohang: at most 50 % of
    MemTotal). Plain anonymous memory in a process outside the node's PID namespace, so the
    node's guard can neither see nor pick it; oom_score_adj 1000 makes it the kernel's first
    victim should anything go wrong. Bounded by ``cap_mib``; killed on exit, even on failure.
    """
    import subprocess

    need_mib = (meminfo_kib("MemAvailable") - target_available_kib) // 1024
    if need_mib <= 0:
        yield 0
        return
    if need_mib > cap_mib:
        raise RuntimeError(f"the ballast would need {need_mib} MiB, over its cap of {cap_mib} MiB: "
                           f"this host has too little memory free for a below-50 % line")
    proc = subprocess.Popen(["choom", "-n", "1000", "--", "python3", str(REPO / "tools" / "sparkguard-anon-hog"),
                             "--mib", str(need_mib), "--comm", "sg-ballast"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while meminfo_kib("MemAvailable") > target_available_kib + 64 * 1024 and time.time() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"the ballast exited early ({proc.returncode})")
            time.sleep(0.2)
        time.sleep(1.0)
        yield need_mib
    finally:
        proc.kill()
        proc.wait(timeout=30)


class SshSession:
    """An open SSH session (sshd-session + a shell) for the length of a cell: a bystander."""

    def __init__(self, handle, node: str):
        import threading

        self.result: tuple | None = None
        command = f"rm -f {SSH_SESSION_END}; while [ ! -e {SSH_SESSION_END} ]; do sleep 0.2; done; echo survived"
        self.thread = threading.Thread(target=lambda: setattr(self, "result", handle.ssh(node, command)),
                                       daemon=True)
        self.thread.start()

    def survived(self, handle, node: str) -> bool:
        handle.ssh(node, f"touch {SSH_SESSION_END}")
        self.thread.join(timeout=30)
        return self.result is not None and self.result[0] == 0 and self.result[1].strip() == "survived"


def meminfo_kib_of(keys: tuple[str, ...]) -> tuple[int, ...]:
    """Several /proc/meminfo fields from one read (one moment)."""
    values = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        values[name] = rest.split()[0] if rest.split() else "0"
    return tuple(int(values[key]) for key in keys)


class HostSampler:
    """The host's HugePages_Surp and MemAvailable every 50 ms.

    HugePages_Surp says when the job's huge pages (its "driver memory") went back. MemAvailable says what a
    failed cell needs explained: whether the node fell back under the line because the job's memory did not
    come back, or because something else took memory meanwhile (HostSampler.explain).
    """

    def __init__(self) -> None:
        import threading

        self.samples: list[tuple[float, int, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.05):
            self.samples.append((time.time(), *meminfo_kib_of(("HugePages_Surp", "MemAvailable"))))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)

    def back_to(self, baseline: int, since: float) -> float | None:
        """Seconds from ``since`` until the surplus was back at ``baseline`` pages."""
        return next((t - since for t, surp, _ in self.samples if t >= since and surp <= baseline), None)

    def explain(self, since: float | None, page_kib: int = 2048) -> str:
        """The host's MemAvailable over the cell, and how much of its fall the job's huge pages do not explain."""
        if not self.samples:
            return "host: no samples"
        (_, surp0, avail0), (_, surp1, avail1) = self.samples[0], self.samples[-1]
        at_signal = next(((surp, avail) for t, surp, avail in self.samples if since and t >= since), None)
        lowest = min(avail for _, _, avail in self.samples)
        unexplained = (avail0 - avail1) - (surp1 - surp0) * page_kib
        mib = lambda kib: f"{kib // 1024} MiB"  # noqa: E731
        return (f"host MemAvailable: {mib(avail0)} when the trainer started, "
                f"{mib(at_signal[1]) if at_signal else '-'} at the first signal, lowest {mib(lowest)}, "
                f"{mib(avail1)} at the end; fallen by {mib(unexplained)} more than the job's huge pages still "
                f"held explain (taken by something else during the cell)")


# The trainer's creep: CREEP_STEP_MIB every 0.2 s, so the SIGTERM line (term_after_bytes, 1.25 GiB) comes about
# 4 s after the trainer starts. Both guards poll for far faster fills (earlyoom 1.7 sleeps at most what 6000 MiB/s
# would take to reach its line, nohang's fill_rate_mem is 6000), and the GPU ranking agent (every 0.5 s in the
# replays) gets several passes before the line. The fast-start cells take everything within one second.
# 32 MiB steps gave 8 s of creep per cell: halved, a full run spends ~90 s less in the replays, which run alone.
CREEP_STEP_MIB = 64


def _hog_command(launch: Launch, plan: ReplayPlan, creep_step_mib: int = CREEP_STEP_MIB) -> str:
    if launch.fast:     # everything within a second, landing past the SIGTERM line and short of SIGKILL's
        pace = f"--step-mib {FAST_STEP_MIB} --interval-s 0 --max-mib {plan.hog_cap_mib} " \
               f"--stop-below-mib {fast_stop_below_mib(plan)}"
    else:
        pace = f"--step-mib {creep_step_mib} --interval-s 0.2 --max-mib {plan.hog_cap_mib}"
    return (f"sparkguard-uma-hog --comm {launch.comm} {pace} --device {DEVICE} {launch.shape} "
            f"--hold --sample-ms 50 --report {HOG_REPORT}").replace("  ", " ")


def _job_pids(events: list[dict]) -> list[int]:
    """Every process of the job as the hog reported it (node PIDs): trainer or rank, workers, launcher."""
    pids = {e["pid"] for e in events if e.get("event") in ("start", "helper-start", "agent-start")}
    pids |= {e["rank_pid"] for e in events if e.get("event") == "rank-started"}
    return sorted(int(p) for p in pids)


def _wait_until_gone(ssh, pids: list[int], timeout_s: float = 30.0) -> float | None:
    """Host time at which none of ``pids`` was alive on the node any more (zombies count as gone)."""
    if not pids:
        return None
    check = " ".join(str(p) for p in pids)
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        _, out, _ = ssh(f"for p in {check}; do s=$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null); "
                        f"[ -n \"$s\" ] && [ \"$s\" != Z ] && echo $p; done; true")
        if not out.split():
            return time.time()
        time.sleep(0.25)
    return None


# The fast start's steps: a model and its optimizer state loaded in the first second.
FAST_STEP_MIB = 256
# How far past the SIGTERM line the fast start stops taking steps: with 256 MiB steps it lands 128-384 MiB past
# it, short of the SIGKILL line 512 MiB past it (ReplayPlan).
FAST_PAST_LINE_MIB = 128


def fast_stop_below_mib(plan: ReplayPlan) -> int:
    """The MemAvailable (MiB) below which the fast-start trainer stops taking steps (the hog's --stop-below-mib).

    The trainer reads MemAvailable as it goes, rather than taking a size worked out beforehand: whatever the
    host frees or takes before or during the cell, it lands where the cell needs it. A size measured just
    before the start (and, before that, one from the module's plan) left the trainer short of the line twice,
    27 and 18 MiB: the host gave back 300-500 MiB while the trainer took its 1.2 GiB, and nothing was signalled.
    """
    return plan.term_line_kib // 1024 - FAST_PAST_LINE_MIB


def run_cell(handle, node: str, plan: ReplayPlan, launch: Launch, timeout_s: float = 120,
             guard: str = "earlyoom", creep_step_mib: int = CREEP_STEP_MIB) -> ReplayResult:
    """Drive one cell on a node whose guard (earlyoom or nohang) already runs with ``plan``'s lines."""
    from sparkguard.roles.vllm.settings import VllmSettings

    install_tools(handle, node)
    ssh = lambda cmd: handle.ssh(node, cmd)  # noqa: E731 - every call is a NEW SSH login
    cleanup = (f"systemctl stop {HOG_UNIT} {BYSTANDER_UNIT} {VLLM_UNIT} {OLLAMA_UNIT} 'sparkguard-job-replay-*' "
               f"2>/dev/null; pkill -9 -f '[s]parkguard-uma-hog'; "
               f"systemctl reset-failed {HOG_UNIT} {BYSTANDER_UNIT} {VLLM_UNIT} {OLLAMA_UNIT} 2>/dev/null; "
               f"rm -f {HOG_REPORT} {GO_FIFO} {HOG_PIDFILE} {OLLAMA_REPORT} {BYSTANDER_REPORT}; touch {SSH_SESSION_END}; "
               f"for c in $(ls /run/fake-docker 2>/dev/null); do docker rm -f $c; done; true")
    ssh(cleanup)
    if launch.no_nvidia_smi:
        ssh(f"rm -f {NVIDIA_SMI}")
    ssh(f"[ -e {DEVICE} ] || install -m 666 /dev/null {DEVICE}")
    limit = 256 * MIB
    serving_adj = VllmSettings().oom_score_adj
    pages = (plan.hog_cap_mib + (OLLAMA_MAX_MIB if launch.beside_ollama else 0)) // 2 + 64
    with hugepage_budget(pages), host_memory_cgroup(f"sparkguard-replay-{os.getpid()}", limit) as group:
        session = None
        sampler = None
        try:
            _, counter_before, _ = ssh("cat /var/lib/prometheus/node-exporter/sparkguard_earlyoom.prom")
            rc, _, err = ssh(f"install -m 666 /dev/null {BYSTANDER_REPORT} && "
                             f"systemd-run --unit {BYSTANDER_UNIT} -q sparkguard-anon-hog --mib 256 --comm python3 "
                             f"--report {BYSTANDER_REPORT} && "
                             f"systemd-run --unit {VLLM_UNIT} -q -p OOMScoreAdjust={serving_adj} "
                             f"sparkguard-anon-hog --mib 384 --comm VLLM::EngineCor --report {BYSTANDER_REPORT}")
            assert rc == 0, err
            ollama_mib = 0
            if launch.beside_ollama:
                _wait_for_bystanders(ssh)
                ollama_mib = _start_sized_ollama(ssh, plan)
            hog = _hog_command(launch, plan, creep_step_mib)
            session = SshSession(handle, node)
            since = ssh("date '+%Y-%m-%d %H:%M:%S'")[1].strip()
            rc, _, err = ssh(
                # systemd-run expands $$ itself: $$$$ reaches sh as $$. KillMode=process: like a job started
                # from an SSH session, nothing kills the workers when the main process ends.
                f"install -m 666 /dev/null {HOG_REPORT} && mkfifo {GO_FIFO} && systemd-run --unit {HOG_UNIT} -q "
                f"-p KillMode=process "
                f"sh -c 'echo $$$$ > {HOG_PIDFILE}; read go < {GO_FIFO}; exec {launch.command.format(hog=hog)}'")
            assert rc == 0, err
            container_pid = _wait_for_pidfile(ssh)
            if launch.host_cgroup:
                host_pid = host_pid_of(container_pid, handle.node(node).pid)
                (group / "cgroup.procs").write_text(str(host_pid))
            _wait_for_bystanders(ssh)  # every page touched before the trainer starts
            baseline = meminfo_kib("HugePages_Surp")
            sampler = HostSampler()
            ssh(f"echo go > {GO_FIFO}")
            logins = 0
            adj, hog_pid = "", None
            ended = False   # the hog's unit stopped running (killed, or exited): else the deadline came first
            deadline = time.time() + timeout_s
            while time.time() < deadline:
                # The trainer's oom_score_adj as the guard saw it when it chose (the GPU ranking agent raises
                # unmarked ones). Read before the job reports a signal only: a signalled rank frees its memory
                # and the agent then lowers it back to 0 while the process still lingers, which is not what
                # the guard saw. The adj is read first, then the report: no signal logged yet means the adj
                # was read before the signal.
                probe = (f"echo \"adj=$(cat /proc/{hog_pid}/oom_score_adj 2>/dev/null)\"; "
                         f"grep -q sigterm {HOG_REPORT} && echo signalled" if hog_pid
                         else f"grep -m1 '\"event\": \"start\"' {HOG_REPORT}")
                rc, out, _ = ssh(f"systemctl is-active {HOG_UNIT}; {probe}")
                logins += 1
                lines = out.splitlines()
                if len(lines) > 1 and hog_pid:
                    if "signalled" not in lines[2:]:
                        adj = lines[1].removeprefix("adj=").strip() or adj
                elif len(lines) > 1:
                    try:
                        hog_pid = _node_pid(ssh, json.loads(lines[1])["pid"], launch.comm)
                    except (ValueError, KeyError):
                        pass
                if lines[:1] and lines[0] not in ("active", "activating"):
                    ended = True
                    break
                time.sleep(0.4)
            # deactivating: the main process has exited, its stop is still running. A hog still running at the
            # deadline (nothing killed it: the case a test asserts on) is not waited for; cleanup stops it.
            for _ in range(120 if ended else 0):
                if ssh(f"systemctl is-active {HOG_UNIT}")[1].strip() not in ("active", "activating", "deactivating"):
                    break
                time.sleep(0.25)
            _, status, _ = ssh(f"systemctl show -p ExecMainCode -p ExecMainStatus --value {HOG_UNIT}")
            _, report, _ = ssh(f"cat {HOG_REPORT}")
            events = [json.loads(line) for line in report.splitlines() if line.strip()]
            job_pids = [] if launch.docker else _job_pids(events)
            signal_at = next((e["t"] for e in events if e.get("event") in ("sigterm", "agent-sigterm")), None)
            gone_at = _wait_until_gone(ssh, job_pids) if ended or signal_at else None
            time.sleep(0.5)
            sampler.close()
            _, states, _ = ssh(f"systemctl is-active {BYSTANDER_UNIT}; systemctl is-active {VLLM_UNIT}; "
                               f"systemctl is-active {OLLAMA_UNIT}")
            _, alive, _ = ssh(f"pgrep -x sshd >/dev/null && echo sshd; systemctl is-active {guard}")
            session_ok = session.survived(handle, node)
            counter = _counter_after(ssh, _kills_total(counter_before), signalled=signal_at is not None)
            _, log, _ = ssh(f"journalctl -u {guard} --since '{since}' --no-pager -o cat")
            _, collected, _ = ssh(f"journalctl -t sparkguard-earlyoom --since '{since}' --no-pager -o cat; "
                                  f"echo '-- agent --'; journalctl -u sparkguard-gpu-ranking --since '{since}' "
                                  f"--no-pager -o short-precise | tail -n 30")
            if not adj and hog_pid:
                # A fast start can be killed before the next poll reads /proc: then the adj is the last one
                # the GPU ranking agent wrote for this PID (its journal line); trainer_killed_first still says
                # whom the guard signalled first.
                adj = _adj_written_by_agent(collected, hog_pid)
            record = None
            if launch.record:
                rc, out, _ = ssh("cat /var/lib/sparkguard/train/last.json")
                record = json.loads(out) if rc == 0 else None
            states = states.split()
            return ReplayResult(
                launch=launch.name,
                hog_exit=" ".join(status.split()),
                hog_events=events,
                term_line_kib=plan.term_line_kib,
                cgroup_peak_bytes=cgroup_peak(group),
                cgroup_limit_bytes=limit,
                bystander_alive=states[:1] == ["active"],
                vllm_alive=states[1:2] == ["active"],
                ollama_alive=not launch.beside_ollama or states[2:3] == ["active"],
                ollama_mib=ollama_mib,
                ssh_session_alive=session_ok,
                sshd_alive="sshd" in alive.split(),
                earlyoom_alive="active" in alive.split(),
                fresh_login=ssh("true")[0] == 0,
                logins_during=logins,
                kills_before=_kills_total(counter_before),
                kills_after=_kills_total(counter),
                kill_counter=counter,
                earlyoom_log=log + "\n-- collector --\n" + collected,
                first_victim_pid=_first_victim(log),
                hog_pid=hog_pid,
                hog_adj=adj,
                record=record,
                job_pids=job_pids,
                job_gone_s=gone_at - signal_at if gone_at and signal_at else None,
                release_s=sampler.back_to(baseline, signal_at) if signal_at else None,
                host_memory=sampler.explain(signal_at),
            )
        finally:
            if sampler is not None:
                sampler.close()
            if session is not None:
                session.survived(handle, node)
            ssh(cleanup)
            if launch.no_nvidia_smi:
                install_tools(handle, node)


OLLAMA_REPORT = "/tmp/sg-replay-ollama.jsonl"
BYSTANDER_REPORT = "/tmp/sg-replay-bystanders.jsonl"


def _ollama_share(plan: ReplayPlan, available_kib: int | None = None) -> int:
    """How much the ollama stand-in takes so that the trainer crosses the line holding TRAINER_SHARE_MIB.

    Sized from the host's MemAvailable now, not from the module's plan: the host drifts by a few hundred MiB
    over a module's cells. A fixed size left the trainer crossing the line with 160 MiB on CI, and killing it
    freed too little to lift the node back over the line, so the guard went on to the vLLM stand-in. Sized
    from now, the trainer's kill always lifts the node TRAINER_SHARE_MIB above the line, and ollama still
    holds more than the trainer when the guard chooses.
    """
    if available_kib is None:
        available_kib = meminfo_kib("MemAvailable")
    room_mib = (available_kib - plan.term_line_kib) // 1024
    share = min(OLLAMA_MAX_MIB, room_mib - TRAINER_SHARE_MIB) // 64 * 64
    if share < TRAINER_SHARE_MIB + 96:
        raise AssertionError(
            f"the host has {room_mib} MiB above the SIGTERM line, too little for ollama to hold more than the "
            f"trainer's {TRAINER_SHARE_MIB} MiB: something else on the machine took memory since the lines were "
            f"set (run the replays alone)")
    return share


def settled_mem_available_kib(tolerance_kib: int = 8 * 1024, timeout_s: float = 10.0) -> int:
    """The host's MemAvailable once it stops moving: two readings 0.25 s apart within ``tolerance_kib``.

    Memory a previous cell's processes held comes back for a while after they were killed; a reading taken
    meanwhile sizes a cell for a node that is about to have more room.
    """
    last = meminfo_kib("MemAvailable")
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        time.sleep(0.25)
        now = meminfo_kib("MemAvailable")
        if abs(now - last) <= tolerance_kib:
            return now
        last = now
    return last


def apply_with_lab_lines(apply_lines) -> ReplayPlan:
    """Apply the site with lines from the host's MemAvailable, then once more with lines from after that apply.

    The apply itself starts services on the node (the guard, the GPU ranking agent, the collectors), which
    take host memory after the first reading: every cell would then start that much closer to its line.
    ``apply_lines(plan)`` applies the site with ``plan``'s lines.
    """
    plan = ReplayPlan.from_host()
    apply_lines(plan)
    settled = ReplayPlan(plan.mem_total_kib, settled_mem_available_kib())
    if (settled.term_percent, settled.kill_percent) != (plan.term_percent, plan.kill_percent):
        apply_lines(settled)
    return settled


# The cell that needs the most room on the node runs first in each module, before the host drifts.
def ollama_first(names: list[str]) -> list[str]:
    return sorted(names, key=lambda name: not ALL_LAUNCHES[name].beside_ollama)


def _start_sized_ollama(ssh, plan: ReplayPlan, attempts: int = 3) -> int:
    """Start the ollama stand-in sized from the host now, and check the room it leaves the trainer.

    The trainer will cross the line holding what is left between MemAvailable and the line once ollama holds
    its share: that must stay well below ollama's share (the cell's point), and large enough that killing
    the trainer lifts the node back over the line. Measured again after ollama took its memory; out of
    range (the host moved meanwhile), ollama is stopped and sized again.
    """
    seen = []
    for _ in range(attempts):
        mib = _ollama_share(plan, settled_mem_available_kib())
        _start_ollama(ssh, mib)
        room_mib = (settled_mem_available_kib() - plan.term_line_kib) // 1024
        if TRAINER_SHARE_MIB // 2 <= room_mib <= mib - 128:
            return mib
        seen.append(f"ollama {mib} MiB left the trainer {room_mib} MiB")
        ssh(f"systemctl stop {OLLAMA_UNIT}; systemctl reset-failed {OLLAMA_UNIT} 2>/dev/null; rm -f {OLLAMA_REPORT}")
    raise AssertionError("the host's memory kept moving while the ollama cell was sized (run the replays alone): "
                         + "; ".join(seen))


def _start_ollama(ssh, mib: int) -> None:
    """ollama as its installer runs it (ollama.service, comm ollama), holding more GPU memory than the trainer."""
    rc, _, err = ssh(f"install -m 666 /dev/null {OLLAMA_REPORT} && systemd-run --unit {OLLAMA_UNIT} -q "
                     f"sparkguard-uma-hog --comm ollama --memfd --device {DEVICE} --step-mib 256 --interval-s 0 "
                     f"--max-mib {mib} --hold --report {OLLAMA_REPORT}")
    assert rc == 0, err
    for _ in range(100):
        if ssh(f"grep -q max-reached {OLLAMA_REPORT}")[0] == 0:
            return
        time.sleep(0.1)
    raise TimeoutError(f"the ollama stand-in did not take its {mib} MiB: {ssh(f'cat {OLLAMA_REPORT}')[1]}")


def _adj_written_by_agent(journal: str, pid: int) -> str:
    """The last oom_score_adj the GPU ranking agent wrote for ``pid`` ("" if it wrote none)."""
    written = re.findall(rf"gpu-ranking: pid {pid} \([^)]*\): oom_score_adj -?\d+ -> (-?\d+)", journal)
    return written[-1] if written else ""


def _node_pid(ssh, reported: int, comm: str) -> int | None:
    """The trainer's PID as the node (and earlyoom) sees it: in a container it reported its namespace's PID."""
    _, out, _ = ssh(f"for s in $(grep -l '^NSpid:.*[[:space:]]{reported}$' /proc/[0-9]*/status 2>/dev/null); do "
                    f"d=${{s%/status}}; [ \"$(cat $d/comm)\" = {comm} ] && echo ${{d#/proc/}}; done")
    found = out.split()
    return int(found[0]) if len(found) == 1 else None


def run_replay(handle, node: str, plan: ReplayPlan, timeout_s: float = 120, oom_first: bool = True,
               guard: str = "earlyoom") -> ReplayResult:
    """One cell: the trainer through sparkguard-oom-first, or (``oom_first=False``) plain python3 in a cgroup."""
    launch = LAUNCHES["sparkguard-oom-first" if oom_first else "python3 in a --memory cgroup"]
    return run_cell(handle, node, plan, launch, timeout_s, guard=guard)


def _wait_for_bystanders(ssh, timeout_s: float = 60.0) -> None:
    """Both bystanders (notebook, vLLM stand-in) have touched all their pages: two "ready" lines in their report."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if ssh(f"grep -c '\"ready\"' {BYSTANDER_REPORT}")[1].strip() == "2":
            return
        time.sleep(0.1)
    raise TimeoutError(f"the bystanders did not touch their pages: {ssh(f'cat {BYSTANDER_REPORT}')[1]}")


def _wait_for_pidfile(ssh) -> int:
    for _ in range(50):
        rc, out, _ = ssh(f"cat {HOG_PIDFILE} 2>/dev/null")
        if rc == 0 and out.strip().isdigit():
            return int(out.strip())
        time.sleep(0.1)
    raise TimeoutError("the replay hog did not start")


def print_matrix(title: str, results: list) -> None:
    """The matrix as the sandbox tests and bench/earlyoom-replay print it."""
    from tests.reporting import report

    if not results:
        return
    report(f"\nincident replay matrix ({title}; bystanders: vLLM stand-in with the larger RSS, python3 notebook, "
           "open SSH session; reaction 0 ms = within the trainer's 50 ms sampling; job gone / memory back: from "
           "the first signal):")
    report(f"  {'job shape':44} {'adj':>5} {'first victim':>12} {'reaction':>9} {'job gone':>9} {'mem back':>9} "
           f"{'bystanders':>10}")
    for r in results:
        def ms(value):
            return f"{value * 1000:.0f} ms" if value is not None else "-"
        report(f"  {r.launch:44} {r.hog_adj or '?':>5} {'job' if r.trainer_killed_first else 'OTHER':>12} "
               f"{ms(r.reaction_s):>9} {ms(r.job_gone_s):>9} {ms(r.release_s):>9} "
               f"{'survived' if r.bystanders_alive else 'HIT':>10}")


def assert_incident_outcome(result: ReplayResult, launch: Launch) -> None:
    """What every replay cell must show, whichever guard runs (earlyoom 1.7 or nohang)."""
    # The guard's whole log of the cell: when it acted twice, the first action is the one that explains it.
    detail = (f"{result.hog_exit}\nadj {result.hog_adj}\njob {result.job_pids}\n{result.hog_events[-6:]}\n"
              f"{result.host_memory}\n{result.earlyoom_log[-12000:]}")
    assert result.got_sigterm, detail
    assert result.trainer_killed_first, detail                    # the guard's first signal went to the job
    # SIGTERM sufficed: no SIGKILL needed (torchrun's agent exits 1 when its rank was the one signalled).
    assert result.hog_exit.split()[-1] in ("143", "15") + (("1",) if "--torchrun" in launch.shape else ()), detail
    assert result.bystander_alive and result.vllm_alive and result.ollama_alive, detail
    if launch.beside_ollama:
        # The cell's point: ollama held more than the trainer when the guard chose, and the trainer still went.
        held = next(e["allocated_mib"] for e in result.hog_events if e.get("event") == "sigterm")
        assert held < result.ollama_mib, f"trainer {held} MiB, ollama {result.ollama_mib} MiB\n{detail}"
    assert result.ssh_session_alive and result.sshd_alive and result.earlyoom_alive and result.fresh_login
    assert result.logins_during >= 2
    # The trainer was ranked as its class: marked 1000, or raised by the agent (GPU memory or device descriptor).
    if launch.marked:
        assert result.hog_adj == "1000", detail
    else:
        assert 600 <= int(result.hog_adj or 0) < 1000, detail
    if result.job_pids:
        # The whole job went, workers and launcher included, within 30 s of the first signal.
        assert result.job_gone_s is not None and result.job_gone_s <= 30, detail
    # Counted once, under the job's name (the trainer's comm), whichever of its processes was signalled.
    assert result.kills_after - result.kills_before == 1, result.kill_counter + detail
    assert f'sparkguard_earlyoom_kills_total{{victim="{launch.comm}"}}' in result.kill_counter, result.kill_counter
    if launch.host_cgroup:
        # The bypass really happened: the trainer held more than twice its cgroup's limit, the cgroup saw almost nothing.
        allocated = max(e.get("allocated_mib", 0) for e in result.hog_events)
        assert allocated * MIB > 2 * result.cgroup_limit_bytes, allocated
        assert 0 <= result.cgroup_peak_bytes < result.cgroup_limit_bytes // 4, result.cgroup_peak_bytes
    if launch.record:
        assert result.record and result.record["killed_by_earlyoom"] is True, result.record
        assert result.record["exit_code"] in (143, 1), result.record
    assert result.reaction_s is not None
