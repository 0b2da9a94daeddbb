#!/usr/bin/env python3
# Managed by sparkguard (role earlyoom). Runs on the node as sparkguard-gpu-ranking.service.
"""sparkguard-gpu-ranking: put the memory no RSS shows into the victim choice.

On a unified-memory node (DGX Spark / GB10, GH200) CUDA allocations are host
RAM taken by the driver: in no process's RSS, charged to no cgroup. The kernel's
oom_score and earlyoom (which reads it) therefore rank a trainer holding 80 GiB
like an idle process, and kill the server or a notebook next to it. This agent
asks the driver who holds GPU memory (``nvidia-smi --query-compute-apps``; on
GB10 that memory IS host RAM) and raises each holder's oom_score_adj into its
class's band (sparkguard/victim_order.py has the arithmetic):

  marked training (adj 1000, sparkguard-job-* units)  left alone: already first
  serving (sparkguard-vllm@ units, vLLM's comms)      raised to serving_adj
  any other holder (python3, llama-server, a JAX job) raised to holder_base + holder_span x share
  avoid list (sshd, journald, earlyoom, monitoring)  left alone
  negative or -1000 values (an operator's protection) left alone

It never lowers a value it did not set itself, and gives a process back the
value it found once the process stops holding GPU memory. Its failures (no
nvidia-smi, nvidia-smi failing, lines it cannot read) never stop it: earlyoom's
name rules stay in force, and the state is written to a status file (read by
``sparkguard audit``) and to node_exporter's textfile directory.

    gpu-ranking --config FILE [--once] [--proc ROOT]
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
    """The band value for a holder (same formula as sparkguard.victim_order.holder_adj)."""
    if not used_bytes or total_bytes <= 0:
        return base
    return base + round(span * min(used_bytes / total_bytes, 1.0))


class Proc:
    """What the agent reads of one process; None fields mean it has gone."""

    def __init__(self, root: str, pid: int):
        self.path = f"{root}/{pid}"
        self.pid = pid
        self.comm = self._read("comm")
        self.cgroup = self._read("cgroup") or ""
        stat = self._read("stat")
        # starttime (field 22) tells a reused PID from the process we adjusted before.
        self.start = stat.rsplit(")", 1)[-1].split()[19] if stat and ")" in stat else None
        adj = self._read("oom_score_adj")
        self.adj = int(adj) if adj and adj.lstrip("-").isdigit() else None

    def _read(self, name: str) -> str | None:
        try:
            with open(f"{self.path}/{name}") as handle:
                return handle.read().strip()
        except OSError:
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


class Ranking:
    def __init__(self, config: dict[str, Any], proc_root: str = "/proc"):
        self.config = config
        self.proc_root = proc_root
        self.avoid = re.compile(config["avoid_regex"])
        self.serving = re.compile(config["serving_regex"])
        # pid -> (starttime, value found, value written): what this agent changed, so it can give it back.
        self.adjusted: dict[int, tuple[str, int, int]] = {}
        self.raised_total = 0
        self.errors_total = 0
        self.logged: set[str] = set()

    def log_once(self, message: str) -> None:
        if message not in self.logged:
            self.logged.add(message)
            say(message)

    def classify(self, proc: Proc) -> str:
        if proc.adj is not None and proc.adj >= 1000 or self.config["training_unit"] in proc.cgroup:
            return "training"
        if proc.adj is not None and proc.adj < 0:
            return "protected"
        if self.avoid.search(proc.comm or ""):
            return "avoid"
        if self.config["serving_unit"] in proc.cgroup or self.serving.search(proc.comm or ""):
            return "serving"
        return "gpu-holder"

    def target(self, kind: str, used: int | None, total: int) -> int | None:
        if kind == "serving":
            return int(self.config["serving_adj"])
        if kind == "gpu-holder":
            return holder_adj(used, total, self.config["holder_base"], self.config["holder_span"])
        return None

    def apply(self, holders: list[tuple[int, int | None]], total: int) -> list[dict[str, Any]]:
        """One pass: raise every holder into its band, give back what non-holders were given."""
        report = []
        seen = set()
        for pid, used in holders:
            proc = Proc(self.proc_root, pid)
            if proc.adj is None or proc.start is None:  # i.e. not proc.alive, spelled out: the checker sees both set below
                self.log_once(f"pid {pid} listed by nvidia-smi has exited; skipped")
                continue
            seen.add(pid)
            kind = self.classify(proc)
            found = proc.adj
            previous = self.adjusted.get(pid)
            if previous and previous[0] == proc.start and previous[2] == proc.adj:
                found = previous[1]          # still our value: the floor is what we found
            want = self.target(kind, used, total)
            entry = {"pid": pid, "comm": proc.comm, "class": kind, "used_bytes": used, "adj": proc.adj}
            if want is None:
                self.adjusted.pop(pid, None)
                report.append(entry)
                continue
            new = max(found, want)
            if new != proc.adj:
                error = proc.write_adj(new)
                if error:
                    self.errors_total += 1
                    self.log_once(f"pid {pid} ({proc.comm}): cannot set oom_score_adj {new}: {error}")
                    self.adjusted.pop(pid, None)
                    report.append(entry)
                    continue
                self.raised_total += 1
                say(f"pid {pid} ({proc.comm}, {kind}, {_mib(used)}): oom_score_adj {proc.adj} -> {new}")
                entry["adj"] = new
            self.adjusted[pid] = (proc.start, found, new)
            report.append(entry)
        for pid in [p for p in self.adjusted if p not in seen]:
            start, found, written = self.adjusted.pop(pid)
            proc = Proc(self.proc_root, pid)
            if proc.alive and proc.start == start and proc.adj == written and found != written:
                if proc.write_adj(found) is None:
                    say(f"pid {pid} ({proc.comm}) holds no GPU memory any more: oom_score_adj {written} -> {found}")
        return report


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


def metrics(state: str, holders: list[dict[str, Any]], ranking: Ranking, now: float) -> str:
    lines = [
        "# HELP sparkguard_gpu_ranking_up 1 while GPU memory feeds the victim choice; 0 on failure (name rules only).",
        "# TYPE sparkguard_gpu_ranking_up gauge",
        f"sparkguard_gpu_ranking_up {1 if state == 'ok' else 0}",
        "# HELP sparkguard_gpu_ranking_nvidia_smi 1 when nvidia-smi exists on the node.",
        "# TYPE sparkguard_gpu_ranking_nvidia_smi gauge",
        f"sparkguard_gpu_ranking_nvidia_smi {0 if state == 'no-nvidia-smi' else 1}",
        "# HELP sparkguard_gpu_ranking_holders Processes holding GPU memory at the last pass.",
        "# TYPE sparkguard_gpu_ranking_holders gauge",
        f"sparkguard_gpu_ranking_holders {len(holders)}",
        "# HELP sparkguard_gpu_ranking_raised_total oom_score_adj values raised.",
        "# TYPE sparkguard_gpu_ranking_raised_total counter",
        f"sparkguard_gpu_ranking_raised_total {ranking.raised_total}",
        "# HELP sparkguard_gpu_ranking_errors_total Failed passes, unreadable lines and refused writes.",
        "# TYPE sparkguard_gpu_ranking_errors_total counter",
        f"sparkguard_gpu_ranking_errors_total {ranking.errors_total}",
        "# HELP sparkguard_gpu_ranking_last_pass_timestamp_seconds When the agent last looked.",
        "# TYPE sparkguard_gpu_ranking_last_pass_timestamp_seconds gauge",
        f"sparkguard_gpu_ranking_last_pass_timestamp_seconds {now:.0f}",
    ]
    return "\n".join(lines) + "\n"


def one_pass(ranking: Ranking, binary: str | None) -> tuple[str, str, list[dict[str, Any]]]:
    config = ranking.config
    if binary is None:
        return "no-nvidia-smi", "no nvidia-smi on this node: victims are chosen by marks, units and names", []
    output, why = query(binary, config.get("timeout_s", 10))
    if output is None:
        ranking.errors_total += 1
        return "error", why, []
    parsed, problems = parse_compute_apps(output)
    for problem in problems:
        ranking.errors_total += 1
        ranking.log_once(f"nvidia-smi: {problem}")
    report = ranking.apply(parsed, memory_total(ranking.proc_root))
    detail = f"{len(report)} GPU-memory holder(s)" + (f"; {len(problems)} unreadable line(s)" if problems else "")
    return "ok", detail, report


def run(config: dict[str, Any], once: bool, proc_root: str) -> int:
    ranking = Ranking(config, proc_root)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    last_state = None
    while True:
        binary = shutil.which(config.get("nvidia_smi", "nvidia-smi"))
        try:
            state, detail, report = one_pass(ranking, binary)
        except Exception as error:  # noqa: BLE001 - the agent must outlive any surprise; earlyoom's rules remain
            ranking.errors_total += 1
            state, detail, report = "error", f"{type(error).__name__}: {error}", []
        if state != last_state:
            say(f"{state}: {detail}")
            last_state = state
        now = time.time()
        status = {"state": state, "detail": detail, "time": int(now), "holders": report,
                  "interval_s": config["interval_s"]}
        try:
            write_atomically(config["status_file"], json.dumps(status, indent=1) + "\n")
            write_atomically(config["textfile"], metrics(state, report, ranking, now))
        except OSError as error:
            ranking.log_once(f"cannot write status: {error}")
        if once or stopping:
            return 0 if state != "error" else 1
        deadline = time.monotonic() + config["interval_s"]
        while time.monotonic() < deadline and not stopping:
            time.sleep(min(0.2, config["interval_s"]))
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
