#!/usr/bin/env python3
# Managed by sparkguard (role earlyoom). Runs on the node as sparkguard-gpu-ranking.service.
"""sparkguard-gpu-ranking: put the memory no RSS shows into the victim choice, for whole jobs.

On a unified-memory node (DGX Spark / GB10, GH200) CUDA allocations are host
RAM taken by the driver: in no process's RSS, charged to no cgroup. The kernel's
oom_score and earlyoom/nohang (which read it) therefore rank a trainer holding
80 GiB like an idle process. This agent finds who holds GPU memory and raises
each holder's oom_score_adj, and that of every process of its job, into the
job's band (sparkguard/domain/memory/victim_order.py has the arithmetic):

  marked training (adj 1000, sparkguard-job-* units)  left alone: already first
  any other holder (python3, a JAX job) and its job   raised to holder_base + holder_span x share
  serving (vLLM, ollama, llama-server, ... by unit    left alone: serving's own band is below
    or name)                                          everything else, set where it is started
  avoid list (sshd, journald, guard, monitoring)      left alone
  negative or -1000 values (an operator's protection) left alone

Who holds GPU memory, from two sources:

- the compute device's descriptors (``/dev/nvidia-uvm``, ``/dev/kfd``, ...): a
  process holds one from CUDA/ROCm init until it exits, and so does every
  worker it forks. The agent watches the device nodes with inotify (IN_OPEN)
  and ranks a new GPU process within milliseconds of its open, before it can
  allocate: no window in which it ranks below serving. This needs no nvidia-smi.
- ``nvidia-smi --query-compute-apps`` every interval, for the memory each
  context owner holds (the share that orders holders among themselves).

A job is the holder with its process group, its descendants and, for a
sparkguard-job unit or a container scope, every process of that cgroup:
forked workers keep the driver memory alive after the main process dies, so
the guard must reach them before anything outside the job. Units are read
from the system slice only (``/system.slice/NAME``): a user's own
``systemd-run --user --unit=sparkguard-job-x`` is not a training unit.

It never lowers a value it did not set itself, and gives a process back the
value it found once its job stops holding GPU memory. Its failures (no
nvidia-smi, nvidia-smi failing, lines it cannot read) never stop it, and it
says when nvidia-smi is blind (device descriptors held, no process listed: the
Jetson Orin case) in a status file (read by ``sparkguard audit``) and in node_exporter's textfile
directory. It also lists every job it knows, so a kill of any of a job's
processes is attributed to the job (the kill collector reads the list).

    gpu-ranking --config FILE [--once] [--proc ROOT]
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import fnmatch
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from typing import Any

QUERY = ["--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"]
MIB = 2**20
# Values nvidia-smi prints instead of a number (recorded on GB10 and on datacenter GPUs).
UNKNOWN_VALUES = ("[n/a]", "[not supported]", "[insufficient permissions]", "[unknown error]", "n/a")
IN_OPEN = 0x20
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
# Classes whose job the agent ranks (training is ranked already; it is listed so kills are attributed).
JOB_CLASSES = ("training", "gpu-holder")
# cgroup names of a whole job: every process in them belongs to the job of any one of them.
# How long a job stays in the jobs file after the agent last saw it.
JOB_MEMORY_S = 300
JOB_CGROUPS = ("sparkguard-job-*.service", "docker-*.scope", "libpod-*.scope", "cri-containerd-*.scope")


def say(message: str) -> None:
    print(f"gpu-ranking: {message}", file=sys.stderr, flush=True)


def parse_compute_apps(text: str) -> tuple[list[tuple[int, int | None]], list[str]]:
    """(pid, used bytes or None when the driver will not say) per line, and the lines it could not read.

    >>> parse_compute_apps("4242, 81234\\n17, [N/A]\\nbogus\\n")
    ([(4242, 85180022784), (17, None)], ["unreadable line 'bogus'"])
    """
    holders: list[tuple[int, int | None]] = []
    problems: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.lower().startswith("no running"):
            continue
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 2 or not parts[0].isdigit() or int(parts[0]) <= 0:
            problems.append(f"unreadable line {line[:80]!r}")
            continue
        pid, used = int(parts[0]), parts[1]
        if used.isdigit():
            holders.append((pid, int(used) * MIB))
        elif used.lower() in UNKNOWN_VALUES:
            holders.append((pid, None))
        else:
            problems.append(f"unreadable memory value in {line[:80]!r}")
    return holders, problems


def holder_adj(used_bytes: int | None, total_bytes: int, base: int, span: int) -> int:
    """The band value for a holder (same formula as sparkguard.domain.memory.victim_order.holder_adj)."""
    if not used_bytes or total_bytes <= 0:
        return base
    return base + round(span * min(used_bytes / total_bytes, 1.0))


def system_unit(cgroup: str) -> str | None:
    """The system service or scope a process runs in, from /proc/PID/cgroup; None outside /system.slice.

    Only the system slice counts: any user can name a unit of their own manager
    (``systemd-run --user --unit=sparkguard-job-x``), and that lands under
    /user.slice, so a substring of the path would let them pick their class.

    >>> system_unit("0::/system.slice/system-sparkguard\\\\x2dvllm.slice/sparkguard-vllm@big.service")
    'sparkguard-vllm@big.service'
    >>> system_unit("0::/user.slice/user-1000.slice/user@1000.service/app.slice/sparkguard-job-x.service")
    >>> system_unit("12:pids:/x\\n1:name=systemd:/system.slice/ollama.service\\n0::/")
    'ollama.service'
    """
    for line in cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3 or parts[1] not in ("", "name=systemd"):
            continue
        components = parts[2].split("/")
        if len(components) < 3 or components[0] != "" or components[1] != "system.slice":
            continue
        for component in components[2:]:
            if component.endswith((".service", ".scope")):
                return component
            if not component.endswith(".slice"):
                break
    return None


def unit_matches(unit: str | None, patterns: list[str]) -> bool:
    """Whether a unit name matches one of the glob patterns (``sparkguard-vllm@*.service``)."""
    return unit is not None and any(fnmatch.fnmatchcase(unit, pattern) for pattern in patterns)


class Proc:
    """What the agent reads of one process; None fields mean it has gone."""

    def __init__(self, root: str, pid: int):
        self.path = f"{root}/{pid}"
        self.pid = pid
        self.comm = self._read("comm")
        self.cgroup = self._read("cgroup") or ""
        stat = self._read("stat")
        fields = stat.rsplit(")", 1)[-1].split() if stat and ")" in stat else []
        # starttime (field 22) tells a reused PID from the process we adjusted before.
        self.start = fields[19] if len(fields) > 19 else None
        self.ppid = int(fields[1]) if len(fields) > 2 else 0
        self.pgid = int(fields[2]) if len(fields) > 2 else 0
        adj = self._read("oom_score_adj")
        self.adj = int(adj) if adj and adj.lstrip("-").isdigit() else None
        self.unit = system_unit(self.cgroup)

    def _read(self, name: str) -> str | None:
        try:
            with open(f"{self.path}/{name}") as handle:
                return handle.read().strip()
        except (OSError, UnicodeDecodeError):
            return None

    @property
    def alive(self) -> bool:
        return self.adj is not None and self.start is not None

    def write_adj(self, value: int) -> str | None:
        """Set oom_score_adj; the reason it failed, or None."""
        try:
            with open(f"{self.path}/oom_score_adj", "w") as handle:
                handle.write(str(value))
            return None
        except OSError as error:
            return error.strerror or str(error)


def process_table(proc_root: str) -> dict[int, tuple[int, int, str | None]]:
    """pid -> (ppid, pgid, cgroup unit) of every process: what a job is made of."""
    table: dict[int, tuple[int, int, str | None]] = {}
    for entry in os.scandir(proc_root):
        if entry.name.isdigit():
            proc = Proc(proc_root, int(entry.name))
            if proc.start is not None:
                table[proc.pid] = (proc.ppid, proc.pgid, proc.unit)
    return table


def job_members(pid: int, table: dict[int, tuple[int, int, str | None]]) -> list[int]:
    """The holder's job: its process group, its descendants and, in a job cgroup, that cgroup; sorted.

    >>> t = {10: (1, 10, None), 11: (10, 10, None), 12: (11, 12, None), 13: (1, 10, None), 20: (1, 20, None)}
    >>> job_members(11, t)
    [10, 11, 12, 13]
    """
    if pid not in table:
        return []
    _, pgid, unit = table[pid]
    members = {pid}
    if pgid > 1:
        members |= {p for p, (_, group, _) in table.items() if group == pgid}
    if unit is not None and any(fnmatch.fnmatchcase(unit, pattern) for pattern in JOB_CGROUPS):
        members |= {p for p, (_, _, u) in table.items() if u == unit}
    children: dict[int, list[int]] = {}
    for child, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(child)
    queue = list(members)
    while queue:
        for child in children.get(queue.pop(), ()):
            if child not in members:
                members.add(child)
                queue.append(child)
    return sorted(members)


def _holds_device(fd_dir: str, devices: set[str]) -> bool | None:
    """Whether one process holds a descriptor of a compute device (None: it is gone, or unreadable)."""
    try:
        for fd in os.scandir(fd_dir):
            try:
                if os.readlink(fd.path) in devices:
                    return True
            except OSError:
                continue
    except OSError:
        return None
    return False


class DeviceScan:
    """Who holds a compute device, without reading every descriptor of every process on every pass.

    A full scan reads each process's descriptors: about 98 ms of CPU per pass for 1,000 processes holding
    36,000 descriptors (bench/gpu-ranking-scan), every interval, on every node. A process gets a device
    descriptor in one of two ways: it opens the device, which the agent's inotify watch (IN_OPEN) sees and
    which clears this cache, or it is forked from a holder, which makes it a new process: a /proc/PID
    directory with a new inode, never in the cache. So a process found holding none is remembered, by
    PID and inode, until a watched device is opened again; holders are read again on every pass (they
    may close it). Without a watch covering every device (no inotify, a device not watched yet) every
    pass is a full scan, and one in ``FULL_EVERY`` passes is anyway (a descriptor passed over a socket
    sends no IN_OPEN).
    """

    FULL_EVERY = 15

    def __init__(self, proc_root: str):
        self.proc_root = proc_root
        self.clean: set[tuple[int, int]] = set()   # (pid, inode of /proc/PID) seen holding no device
        self.devices: frozenset[str] = frozenset()
        self.passes = 0
        self.read_last = 0                           # descriptor folders read by the last scan (for tests)

    def opened(self) -> None:
        """A watched device was opened: any process may hold it now."""
        self.clean.clear()

    def holders(self, devices: set[str], watched: bool) -> set[int]:
        found: set[int] = set()
        if not devices:
            return found
        if not watched or frozenset(devices) != self.devices or self.passes % self.FULL_EVERY == 0:
            self.clean.clear()
            self.devices = frozenset(devices)
        self.passes += 1
        clean: set[tuple[int, int]] = set()
        self.read_last = 0
        for entry in os.scandir(self.proc_root):
            if not entry.name.isdigit():
                continue
            key = (int(entry.name), entry.inode())
            if key in self.clean:
                clean.add(key)
                continue
            self.read_last += 1
            holds = _holds_device(f"{self.proc_root}/{entry.name}/fd", devices)
            if holds:
                found.add(key[0])
            elif holds is False and watched:
                clean.add(key)
        self.clean = clean
        return found


class Ranking:
    def __init__(self, config: dict[str, Any], proc_root: str = "/proc"):
        self.config = config
        self.proc_root = proc_root
        self.avoid = re.compile(config["avoid_regex"])
        self.serving = re.compile(config["serving_regex"])
        self.launcher = re.compile(config.get("launcher_regex", "^$"))
        self.serving_units: list[str] = list(config.get("serving_units", ()))
        self.training_units: list[str] = [f"{config['training_unit']}*.service"]
        # pid -> (starttime, value found, value written): what this agent changed, so it can give it back.
        self.adjusted: dict[int, tuple[str, int, int]] = {}
        # pid -> monotonic time it was first seen holding a device descriptor (for the blind check).
        self.device_seen: dict[int, float] = {}
        # pid -> last memory nvidia-smi reported, so a device-triggered pass keeps each holder's share.
        self.last_used: dict[int, int | None] = {}
        self.jobs: list[dict[str, Any]] = []
        # job id -> (time last seen, job): a job stays listed for JOB_MEMORY_S after it is gone, because
        # the guard records its kill only once the victim has exited (and the agent may have looked since).
        self.job_history: dict[str, tuple[float, dict[str, Any]]] = {}
        self.raised_total = 0
        self.errors_total = 0
        self.logged: set[str] = set()
        self.scan = DeviceScan(proc_root)
        # Whether every compute device is under the inotify watch (run() says so each pass): only then may
        # the scan trust what it saw before.
        self.opens_watched = False

    def log_once(self, message: str) -> None:
        if message not in self.logged:
            self.logged.add(message)
            say(message)

    def classify(self, proc: Proc) -> str:
        if proc.adj is not None and proc.adj >= 1000 or unit_matches(proc.unit, self.training_units):
            return "training"
        if proc.adj is not None and proc.adj < 0:
            return "protected"
        if self.avoid.search(proc.comm or ""):
            return "avoid"
        if unit_matches(proc.unit, self.serving_units) or self.serving.search(proc.comm or ""):
            return "serving"
        return "gpu-holder"

    def target(self, kind: str, used: int | None, total: int) -> int | None:
        if kind == "gpu-holder":
            return holder_adj(used, total, self.config["holder_base"], self.config["holder_span"])
        return None

    def raise_to(self, proc: Proc, want: int, kind: str, used: int | None) -> int | None:
        """Raise one process to ``want`` (never lowering what it had); its value now, None if the write failed."""
        assert proc.adj is not None and proc.start is not None
        found = proc.adj
        previous = self.adjusted.get(proc.pid)
        if previous and previous[0] == proc.start and previous[2] == proc.adj:
            found = previous[1]          # still our value: the floor is what we found
        new = max(found, want)
        if new != proc.adj:
            error = proc.write_adj(new)
            if error:
                self.errors_total += 1
                self.log_once(f"pid {proc.pid} ({proc.comm}): cannot set oom_score_adj {new}: {error}")
                self.adjusted.pop(proc.pid, None)
                return None
            self.raised_total += 1
            say(f"pid {proc.pid} ({proc.comm}, {kind}, {_mib(used)}): oom_score_adj {proc.adj} -> {new}")
        self.adjusted[proc.pid] = (proc.start, found, new)
        return new

    def apply(self, holders: list[tuple[int, int | None]], total: int, give_back: bool = True) -> list[dict[str, Any]]:
        """One pass: raise every holder and its job into the band; give back what processes out of any job got.

        ``give_back=False`` (a pass woken by a device open) only raises: it has not asked nvidia-smi.
        """
        report = []
        ranked: set[int] = set()
        jobs: list[dict[str, Any]] = []
        table: dict[int, tuple[int, int, str | None]] | None = None
        for pid, used in holders:
            proc = Proc(self.proc_root, pid)
            if proc.adj is None or proc.start is None:  # i.e. not proc.alive, spelled out: the checker sees both set below
                self.log_once(f"pid {pid} listed as a GPU-memory holder has exited; skipped")
                continue
            if pid in ranked:
                continue
            kind = self.classify(proc)
            entry = {"pid": pid, "comm": proc.comm, "class": kind, "used_bytes": used, "adj": proc.adj}
            report.append(entry)
            if kind not in JOB_CLASSES:
                self.adjusted.pop(pid, None)
                continue
            table = table if table is not None else process_table(self.proc_root)
            members = sorted(set(job_members(pid, table) or [pid]) | self.launchers_of(pid, table))
            want = self.target(kind, used, total)
            members_seen: list[list[Any]] = []
            job: dict[str, Any] = {"id": f"{pid}:{proc.start}", "name": proc.comm, "unit": proc.unit, "class": kind,
                                   "members": members_seen}
            for member_pid in members:
                member = proc if member_pid == pid else Proc(self.proc_root, member_pid)
                if not member.alive:
                    continue
                members_seen.append([member_pid, member.start])
                ranked.add(member_pid)
                if want is None or member_pid != pid and self.classify(member) not in ("gpu-holder", "training"):
                    continue   # a protected, avoided or serving process inside a job keeps its own value
                value = self.raise_to(member, want, kind if member_pid == pid else "job of " + str(pid), used)
                if member_pid == pid and value is not None:
                    entry["adj"] = value
            entry["job"] = job["id"]
            jobs.append(job)
        if give_back:
            self.jobs = jobs
            for pid in [p for p in self.adjusted if p not in ranked]:
                start, found, written = self.adjusted.pop(pid)
                proc = Proc(self.proc_root, pid)
                if proc.alive and proc.start == start and proc.adj == written and found != written:
                    if proc.write_adj(found) is None:
                        say(f"pid {pid} ({proc.comm}) holds no GPU memory any more: oom_score_adj {written} -> {found}")
        else:
            known = {job["id"] for job in jobs}
            self.jobs = jobs + [job for job in self.jobs if job["id"] not in known]
        return report

    def launchers_of(self, pid: int, table: dict[int, tuple[int, int, str | None]]) -> set[int]:
        """The launchers above a holder (torchrun's ``pt_elastic``, ``accelerate``): part of its job.

        torchrun starts each rank in a session of its own, so the agent that would
        restart it is neither in the rank's process group nor below it.
        """
        found: set[int] = set()
        parent = table.get(pid, (0, 0, None))[0]
        while parent > 1 and parent not in found:
            comm = Proc(self.proc_root, parent).comm or ""
            if not self.launcher.search(comm):
                break
            found.add(parent)
            parent = table.get(parent, (0, 0, None))[0]
        return found

    def job_lines(self, now: float) -> str:
        """The jobs file: "PID START JOB UNIT NAME" for every member of every job seen in the last JOB_MEMORY_S.

        >>> r = Ranking({"avoid_regex": "^$", "serving_regex": "^$", "training_unit": "x"})
        >>> r.jobs = [{"id": "7:90", "name": "python 3", "unit": None, "members": [[7, "90"], [8, "91"]]}]
        >>> print(r.job_lines(1000.0), end="")
        7 90 7:90 - python_3
        8 91 7:90 - python_3
        """
        for job in self.jobs:
            self.job_history[job["id"]] = (now, job)
        self.job_history = {key: (seen, job) for key, (seen, job) in self.job_history.items()
                            if now - seen <= JOB_MEMORY_S}
        lines = []
        for _, job in self.job_history.values():
            name = re.sub(r"[^A-Za-z0-9_.:@+-]", "_", job.get("name") or "unknown")[:15]
            unit = re.sub(r"[^A-Za-z0-9_.:@\\-]", "_", job.get("unit") or "-")
            lines += [f"{pid} {start} {job['id']} {unit} {name}\n" for pid, start in job["members"]]
        return "".join(lines)

    def devices(self) -> set[str]:
        return {path for path in self.config.get("device_paths", ()) if os.path.exists(path)}

    def device_pass(self, total: int) -> list[dict[str, Any]]:
        """Rank every process holding a compute device now (a device was just opened): raises only."""
        holders = self.scan.holders(self.devices(), self.opens_watched)
        return self.apply([(pid, self.last_used.get(pid)) for pid in sorted(holders)], total, give_back=False)

    def blind(self, listed: set[int], holders: set[int], now: float) -> str | None:
        """Why nvidia-smi looks blind, or None: device descriptors held for a while, no process listed at all."""
        self.device_seen = {pid: self.device_seen.get(pid, now) for pid in holders}
        settled = [pid for pid, seen in self.device_seen.items() if now - seen >= self.config.get("blind_after_s", 30)]
        if settled and not listed:
            return (f"{len(settled)} process(es) hold a GPU device (pid {', '.join(map(str, sorted(settled)[:4]))})"
                    " but nvidia-smi lists no process: ranked by their descriptors only, at the holder band's floor")
        return None


def _mib(used: int | None) -> str:
    return "memory not reported" if used is None else f"{used // MIB} MiB"


def memory_total(proc_root: str) -> int:
    with open(f"{proc_root}/meminfo") as handle:
        for line in handle:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


def query(binary: str, timeout_s: float) -> tuple[str | None, str]:
    """nvidia-smi's output, or None and why not."""
    try:
        result = subprocess.run([binary, *QUERY], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None, f"nvidia-smi did not answer within {timeout_s:g} s"
    except OSError as error:
        return None, f"nvidia-smi could not run: {error.strerror or error}"
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        return None, f"nvidia-smi exited {result.returncode}: {detail[-1][:160] if detail else 'no output'}"
    return result.stdout, ""


def write_atomically(path: str, text: str) -> None:
    directory = os.path.dirname(path)
    if directory and not os.path.isdir(directory):
        os.makedirs(directory, exist_ok=True)
    temporary = f"{path}.tmp"
    with open(temporary, "w") as handle:
        handle.write(text)
    os.chmod(temporary, 0o644)
    os.replace(temporary, path)


def metrics(state: str, holders: list[dict[str, Any]], ranking: Ranking, now: float, device_count: int) -> str:
    gauges = [
        ("up", "gauge", "1 while GPU memory feeds the victim choice; 0 on failure or when nvidia-smi is blind.",
         1 if state == "ok" else 0),
        ("nvidia_smi", "gauge", "1 when nvidia-smi exists on the node.", 0 if state == "no-nvidia-smi" else 1),
        ("blind", "gauge", "1 when processes hold a GPU device but nvidia-smi lists none of them.",
         1 if state == "blind" else 0),
        ("holders", "gauge", "Processes holding GPU memory at the last pass.", len(holders)),
        ("device_holders", "gauge", "Processes holding a GPU compute device descriptor at the last pass.",
         device_count),
        ("jobs", "gauge", "Jobs (holder, its process group, descendants and job cgroup) ranked at the last pass.",
         len(ranking.jobs)),
        ("raised_total", "counter", "oom_score_adj values raised.", ranking.raised_total),
        ("errors_total", "counter", "Failed passes, unreadable lines and refused writes.", ranking.errors_total),
        ("last_pass_timestamp_seconds", "gauge", "When the agent last looked.", f"{now:.0f}"),
    ]
    lines = []
    for name, kind, text, value in gauges:
        lines += [f"# HELP sparkguard_gpu_ranking_{name} {text}", f"# TYPE sparkguard_gpu_ranking_{name} {kind}",
                  f"sparkguard_gpu_ranking_{name} {value}"]
    return "\n".join(lines) + "\n"


def one_pass(ranking: Ranking, binary: str | None) -> tuple[str, str, list[dict[str, Any]], int]:
    """Ask the driver (nvidia-smi) and the device descriptors who holds GPU memory; rank their jobs.

    Returns (state, detail, holders, processes holding a device).
    """
    config = ranking.config
    total = memory_total(ranking.proc_root)
    on_device = ranking.scan.holders(ranking.devices(), ranking.opens_watched)
    if binary is None:
        report = ranking.apply([(pid, None) for pid in sorted(on_device)], total)
        detail = "no nvidia-smi on this node: victims are chosen by marks, units, names and device descriptors"
        found = f"; {len(on_device)} device holder(s) in {len(ranking.jobs)} job(s)" if on_device else ""
        return "no-nvidia-smi", detail + found, report, len(on_device)
    output, why = query(binary, config.get("timeout_s", 10))
    if output is None:
        ranking.errors_total += 1
        ranking.apply([(pid, ranking.last_used.get(pid)) for pid in sorted(on_device)], total, give_back=False)
        return "error", why, [], len(on_device)
    parsed, problems = parse_compute_apps(output)
    for problem in problems:
        ranking.errors_total += 1
        ranking.log_once(f"nvidia-smi: {problem}")
    ranking.last_used = dict(parsed)
    listed = {pid for pid, _ in parsed}
    holders = parsed + [(pid, None) for pid in sorted(on_device - listed)]
    report = ranking.apply(holders, total)
    blind = ranking.blind(listed, on_device, time.monotonic())
    if blind:
        return "blind", blind, report, len(on_device)
    detail = f"{len(report)} GPU-memory holder(s)" + (f"; {len(problems)} unreadable line(s)" if problems else "")
    return "ok", detail, report, len(on_device)


class DeviceWatch:
    """inotify IN_OPEN on the compute device nodes: wakes the agent the moment a new GPU process starts."""

    def __init__(self) -> None:
        self.fd = -1
        self.watched: set[str] = set()
        self.libc: Any = None
        try:
            self.libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            self.fd = self.libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        except (OSError, AttributeError):
            self.fd = -1

    def watch(self, paths: set[str]) -> None:
        """Add a watch for each device node that exists now (nvidia-uvm appears at the first CUDA use)."""
        if self.fd < 0:
            return
        for path in sorted(paths - self.watched):
            if self.libc.inotify_add_watch(self.fd, path.encode(), IN_OPEN) >= 0:
                self.watched.add(path)

    def covers(self, paths: set[str]) -> bool:
        """Whether an open of any of ``paths`` wakes the agent."""
        return self.fd >= 0 and bool(paths) and paths <= self.watched

    def wait(self, timeout_s: float) -> bool:
        """Sleep up to ``timeout_s``; True when a watched device was opened meanwhile (events drained)."""
        if self.fd < 0 or not self.watched:
            time.sleep(timeout_s)
            return False
        ready, _, _ = select.select([self.fd], [], [], timeout_s)
        if not ready:
            return False
        try:
            while os.read(self.fd, 4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        return True



def run(config: dict[str, Any], once: bool, proc_root: str) -> int:
    ranking = Ranking(config, proc_root)
    watch = DeviceWatch()
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    last_state = None
    while True:
        binary = shutil.which(config.get("nvidia_smi", "nvidia-smi"))
        devices = 0
        try:
            devices_now = ranking.devices()
            watch.watch(devices_now)
            ranking.opens_watched = watch.covers(devices_now)
            state, detail, report, devices = one_pass(ranking, binary)
        except Exception as error:  # noqa: BLE001 - the agent must outlive any surprise; the guard's rules remain
            ranking.errors_total += 1
            state, detail, report = "error", f"{type(error).__name__}: {error}", []
        if state != last_state:
            say(f"{state}: {detail}")
            last_state = state
        now = time.time()
        status = {"state": state, "detail": detail, "time": int(now), "holders": report,
                  "interval_s": config["interval_s"], "jobs": ranking.jobs, "device_holders": devices}
        try:
            write_atomically(config["status_file"], json.dumps(status, indent=1) + "\n")
            write_atomically(config["textfile"], metrics(state, report, ranking, now, devices))
            if "jobs_file" in config:
                write_atomically(config["jobs_file"], ranking.job_lines(now))
        except OSError as error:
            ranking.log_once(f"cannot write status: {error}")
        if once or stopping:
            return 0 if state not in ("error",) else 1
        deadline = time.monotonic() + config["interval_s"]
        while not stopping and (left := deadline - time.monotonic()) > 0:
            if watch.wait(min(0.2, left)):
                ranking.scan.opened()
                try:
                    ranking.device_pass(memory_total(proc_root))
                    if "jobs_file" in config:
                        write_atomically(config["jobs_file"], ranking.job_lines(time.time()))
                except Exception as error:  # noqa: BLE001 - as above
                    ranking.errors_total += 1
                    ranking.log_once(f"device pass failed: {type(error).__name__}: {error}")
        if stopping:
            return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-ranking", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True)
    parser.add_argument("--once", action="store_true", help="one pass, then exit (1 if it failed)")
    parser.add_argument("--proc", default="/proc", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    with open(args.config) as handle:
        config = json.load(handle)
    return run(config, args.once, args.proc)


if __name__ == "__main__":
    sys.exit(main())
