"""The seed's incident on a VM with its own kernel: the mechanics of bench/incident and tests/vm/test_incident_vm.py.

One VM node (tests/vm/harness.py, image variant "incident": Debian bookworm with
the real docker.io engine, Prometheus, node_exporter and Alertmanager baked in,
cgroup v2, a swap disk as the Spark has a swap file) runs the incident scaled to
its 1.5 GiB:

- a trainer as ``docker run --memory 256m --network none``: a trainer image made
  offline (``docker import`` of the python3 rootfs baked into the VM image; no
  registry), running ``sparkguard-uma-hog`` whose memory is a hugetlb memfd with
  two forked workers keeping it: STAND-IN for CUDA allocations on GB10, which no
  memory cgroup charges and no RSS shows. It grows in the seed's shape (steadily,
  until nothing is left), far past its container's limit;
- a vLLM stand-in as its ``sparkguard-vllm@`` unit would run it (comm
  ``VLLM::EngineCor``, serving's oom_score_adj in the treatment), and a notebook
  stand-in (``python3``);
- a sampler (MemAvailable, swap, HugePages_Surp every second, written in the VM),
  a webhook receiver on the VM's loopback that records when each notification
  arrived, and an SSH probe from the host once a second over the forwarded port.
  Containers run with ``--network none``: no traffic leaves loopback or the VM.

Two arms: **control** (Debian as installed: Prometheus and Alertmanager as the
packages ship them, no sparkguard) and **treatment** (the site applied: earlyoom
and the GPU ranking agent, swap policy, monitoring with its alerts and a webhook
receiver, recovery). The stand-in ``nvidia-smi`` (tests/replay.py) is on both.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import REPO
from tests.replay import FAKE_NVIDIA_SMI

WORK = "/var/lib/sg-incident"
HOOK_PORT = 9099
HOOK_LOG = f"{WORK}/hook.jsonl"
SAMPLES = f"{WORK}/samples"
TRAINER_REPORT = f"{WORK}/trainer.jsonl"
TRAINER = "sg-trainer"
TRAINER_IMAGE = "sg-trainer:1"
DEVICE = "/dev/nvidia-uvm"     # STAND-IN for the compute device CUDA opens (a regular file)
UNRESPONSIVE_S = 30            # this long without an SSH answer = unresponsive
PROBE_TIMEOUT_S = 10           # a probe (a fresh SSH login running `true`) unanswered after this long
# The webhook receiver: each POST's arrival time and the alert names and states in it.
RECEIVER = f'''#!/usr/bin/env python3
import json, time
from http.server import BaseHTTPRequestHandler, HTTPServer

class Hook(BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{{}}")
        alerts = [[a.get("labels", {{}}).get("alertname"), a.get("labels", {{}}).get("severity"), a.get("status"),
                   a.get("labels", {{}})] for a in body.get("alerts", [])]
        with open("{HOOK_LOG}", "a") as log:
            log.write(json.dumps({{"t": time.time(), "alerts": alerts}}) + "\\n")
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass

HTTPServer(("127.0.0.1", {HOOK_PORT}), Hook).serve_forever()
'''
# One line a second, to a file on the node and to its serial console (qemu writes that to a file on the host,
# so the samples of a node that hangs are still read): "SGS epoch uptime MemAvailable SwapTotal SwapFree
# HugePages_Surp" (s, s, kB, kB, kB, pages). One process with its memory locked (mlockall): it keeps sampling
# while everything else is swapped out, as long as it gets a CPU; a shell loop forking awk would stall first.
SAMPLER = f"""#!/usr/bin/python3
import ctypes, time
ctypes.CDLL(None).mlockall(3)   # MCL_CURRENT | MCL_FUTURE
keys = ("MemAvailable", "SwapTotal", "SwapFree", "HugePages_Surp")
with open("{SAMPLES}", "a") as out, open("/dev/ttyS0", "w") as console:
    while True:
        info = dict(line.split(":", 1) for line in open("/proc/meminfo"))
        uptime = open("/proc/uptime").read().split()[0]
        line = "SGS %.2f %s %s\\n" % (time.time(), uptime, " ".join(info[k].split()[0] for k in keys))
        for sink in (out, console):
            sink.write(line)
            sink.flush()
        time.sleep(1)
"""


def ensure_image(log=lambda *_: None):
    """The incident VM's image (bookworm, cloud kernel, the "incident" variant: docker, the monitoring
    packages, the trainer rootfs), built once per cache: the test module, bench/incident and
    tests/prepare_images.py boot the same one."""
    from tests.vm import harness

    return harness.ensure_image("bookworm", kernel="cloud", variant="incident", log=log)


def install(vm) -> None:
    """Tools, stand-ins and the trainer image on the node (both arms)."""
    for tool in ("sparkguard-uma-hog", "sparkguard-anon-hog"):
        vm.check(f"cat > /usr/local/bin/{tool} <<'SG_EOF'\n{(REPO / 'tools' / tool).read_text()}\nSG_EOF\n"
                 f"chmod 755 /usr/local/bin/{tool}")
    for path, text in (("/usr/local/bin/nvidia-smi", FAKE_NVIDIA_SMI), ("/usr/local/bin/sg-receiver", RECEIVER),
                       ("/usr/local/bin/sg-sampler", SAMPLER)):
        vm.check(f"cat > {path} <<'SG_EOF'\n{text}\nSG_EOF\nchmod 755 {path}")
    vm.check(f"mkdir -p {WORK}; rm -f {WORK}/*; [ -e {DEVICE} ] || install -m 666 /dev/null {DEVICE}; "
             "systemctl start docker; docker image inspect " + TRAINER_IMAGE + " >/dev/null 2>&1 || "
             f"docker import /var/lib/sparkguard-vm/trainer-rootfs.tar {TRAINER_IMAGE} >/dev/null", timeout=300)


def treatment_vars() -> str:
    """The site's settings for the treatment arm: as shipped, plus the receiver and a short group_wait.

    The guard's lines are the shipped ones (8 % / 4 % of MemTotal): fractions of
    MemTotal, they mean the same on the VM as on a Spark.
    """
    return ("    monitoring:\n"
            "      enabled: true\n"
            f"      alertmanager: {{webhook_url: 'http://127.0.0.1:{HOOK_PORT}/hook', group_wait: 5s}}\n")


def term_line_kib(vm) -> int:
    """The shipped SIGTERM line on this node, in KiB of MemAvailable."""
    from sparkguard.roles.earlyoom.settings import EarlyoomSettings

    total = int(vm.check("awk '/^MemTotal:/ {print $2}' /proc/meminfo"))
    return int(total * EarlyoomSettings().term_percent / 100)


@dataclass
class Probe:
    """The host's SSH probe, once a second: (host time, seconds to answer or None)."""

    vm: object
    samples: list[tuple[float, float | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        # An unanswered probe is a sample, not news: paramiko's transport thread would log a traceback for each.
        logging.getLogger("paramiko").setLevel(logging.CRITICAL)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            started = time.time()
            try:
                rc, _, _ = self.vm.ssh("true", timeout=PROBE_TIMEOUT_S, connect_patience=0)  # type: ignore[attr-defined]
                answer = time.time() - started if rc == 0 else None
            except Exception:  # noqa: BLE001 - an unanswered probe is the measurement
                answer = None
            self.samples.append((started, answer))
            self.stop.wait(max(0.0, 1.0 - (time.time() - started)))

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=15)

    def longest_gap(self) -> float:
        """The longest run of unanswered probes, in seconds."""
        longest, start = 0.0, None
        for t, answer in self.samples:
            if answer is None and start is None:
                start = t
            elif answer is not None and start is not None:
                longest, start = max(longest, t - start), None
        if start is not None and self.samples:
            longest = max(longest, self.samples[-1][0] - start)
        return longest

    def unresponsive_at(self) -> float | None:
        """When the node stopped answering for UNRESPONSIVE_S or more (the first such run's start)."""
        start = None
        for t, answer in self.samples:
            if answer is None:
                start = t if start is None else start
                if t - start >= UNRESPONSIVE_S:
                    return start
            else:
                start = None
        return None

    def answered_after(self, moment: float) -> bool:
        return any(answer is not None for t, answer in self.samples if t > moment)


@dataclass
class IncidentRun:
    arm: str
    started: float = 0.0                       # host time the trainer was started
    limit_s: float = 0.0
    samples: list[tuple[float, int, int, int, int]] = field(default_factory=list)
    probe: list[tuple[float, float | None]] = field(default_factory=list)
    longest_gap_s: float = 0.0
    unresponsive_at: float | None = None
    came_back: bool | None = None
    hooks: list[dict] = field(default_factory=list)
    kills: list[str] = field(default_factory=list)
    kernel_kills: list[str] = field(default_factory=list)
    trainer_events: list[dict] = field(default_factory=list)
    trainer_state: dict = field(default_factory=dict)
    survivors: dict[str, bool] = field(default_factory=dict)
    term_line_kib: int | None = None
    reachable_at_end: bool = True
    notes: list[str] = field(default_factory=list)

    def crossed_line_at(self) -> float | None:
        """When MemAvailable reached the SIGTERM line: the sampler's first reading at or below it, or the guard's
        first signal if earlier (it reads MemAvailable every 100 ms; a dip between two 1 s samples is real)."""
        if self.term_line_kib is None:
            return None
        sampled = next((t for t, avail, *_ in self.samples if t >= self.started and avail <= self.term_line_kib), None)
        signalled = self.first_signal_at()
        return min((t for t in (sampled, signalled) if t is not None), default=None)

    def first_signal_at(self) -> float | None:
        """The guard's first SIGTERM/SIGKILL to a process (journal time)."""
        for line in self.kills:
            if "sending SIG" in line and " to process " in line or "signalled" in line:
                try:
                    return float(line.split()[0])
                except ValueError:
                    continue
        return None

    def alert_timeline(self) -> list[str]:
        """Each alert's first firing notification: 'NAME (severity) +Ns' from the trainer's start."""
        seen: dict[str, str] = {}
        for t, name, severity, status in sorted(self.alerts()):
            if status == "firing" and name != "Watchdog" and name not in seen:
                seen[name] = f"{name} ({severity}) +{t - self.started:.0f}s"
        return list(seen.values())

    def swap_used_mib(self) -> list[tuple[float, float]]:
        return [(t, (total - free) / 1024) for t, _, total, free, _ in self.samples]

    def alerts(self) -> list[tuple[float, str, str, str]]:
        """(arrival, alertname, severity, status) of every notification."""
        return [(h["t"], alert[0], alert[1], alert[2]) for h in self.hooks for alert in h["alerts"]]

    def first_alert(self, severity: str | None = None) -> float | None:
        return next((t for t, name, sev, status in sorted(self.alerts())
                     if status == "firing" and name != "Watchdog" and (severity is None or sev == severity)), None)

    def summary(self) -> dict:
        since = lambda t: round(t - self.started, 1) if t is not None else None  # noqa: E731
        swap = self.swap_used_mib()
        return {
            "arm": self.arm,
            "limit_s": self.limit_s,
            "line_crossed_s": since(self.crossed_line_at()),
            "max_swap_used_mib": round(max((s for _, s in swap), default=0.0), 1),
            "probe_latency_max_s": round(max((a for _, a in self.probe if a is not None), default=0.0), 2),
            "longest_unanswered_s": round(self.longest_gap_s, 1),
            "unresponsive_s": since(self.unresponsive_at),
            "came_back": self.came_back,
            "kills": self.kills,
            "kernel_kills": self.kernel_kills,
            "first_alert_s": since(self.first_alert()),
            "first_critical_s": since(self.first_alert("critical")),
            "alerts": sorted({name for _, name, _, status in self.alerts() if status == "firing"} - {"Watchdog"}),
            "alert_timeline": self.alert_timeline(),
            "trainer": self.trainer_state,
            "survivors": self.survivors,
            "reachable_at_end": self.reachable_at_end,
            "notes": self.notes,
        }


def start_bystanders(vm, serving_adj: int | None) -> None:
    """The vLLM stand-in as its unit would run it, the notebook, the sampler and the receiver."""
    adj = f"-p OOMScoreAdjust={serving_adj} " if serving_adj is not None else ""
    vm.check("systemctl stop sg-vllm sg-notebook sg-sampler sg-receiver 2>/dev/null; "
             "systemctl reset-failed sg-vllm sg-notebook sg-sampler sg-receiver 2>/dev/null; "
             # The observers: never the guard's victims (-1000), they only watch.
             "systemd-run -q --unit sg-sampler -p OOMScoreAdjust=-1000 /usr/local/bin/sg-sampler && "
             "systemd-run -q --unit sg-receiver -p OOMScoreAdjust=-1000 /usr/local/bin/sg-receiver && "
             f"systemd-run -q --unit sg-vllm {adj}sparkguard-anon-hog --mib 256 --comm VLLM::EngineCor && "
             "systemd-run -q --unit sg-notebook sparkguard-anon-hog --mib 160 --comm python3")


def seed_creep(vm) -> str:
    """The hog's flags for the seed's slide: fast until 1 point above the critical line, then 2 MiB every 15 s
    for (margin + 2) points of MemTotal, then fast again. With the shipped lines (8 %, critical 10 %) the band
    from 10 % to 8 % takes ~3.5 minutes on the VM, longer than NodeMemoryAvailableCritical's `for: 2m`: the
    page comes before the guard acts, as it would in the seed's 20-minute slide at the VM's scale."""
    from sparkguard.roles.monitoring.alerts import AlertThresholds

    t = AlertThresholds()
    total_mib = int(vm.check("awk '/^MemTotal:/ {print $2}' /proc/meminfo")) // 1024
    below = int(total_mib * (t.term_percent + t.critical_margin_percent + 1) / 100)
    span = int(total_mib * (t.critical_margin_percent + 2) / 100)
    return f"--slow-below-mib {below} --slow-step-mib 2 --slow-interval-s 15 --slow-for-mib {span}"


def start_trainer(vm, step_mib: int = 16, interval_s: float = 0.5, max_mib: int = 4096, retry_s: float = 30,
                  creep: str = "") -> None:
    """The trainer as the seed ran it: plain `docker run --memory`, its memory invisible to the cgroup.

    ``retry_s``: each huge page is retried after ENOMEM (the hog's --retry-s), so the
    stand-in keeps taking memory while reclaim and compaction can free some, as the
    driver's small pages would, instead of stopping at the first 2 MiB block the
    kernel cannot assemble at once (on 1.5 GiB that was ~200 MiB available).
    """
    vm.check(f"docker rm -f {TRAINER} >/dev/null 2>&1; rm -f {TRAINER_REPORT}; "
             f"docker run -d --name {TRAINER} --memory 256m --network none "
             f"-v /usr/local/bin/sparkguard-uma-hog:/hog:ro -v {WORK}:/out -v {DEVICE}:{DEVICE} {TRAINER_IMAGE} "
             f"/usr/bin/python3 /hog --comm python3 --memfd --helpers 2 --helper-watch-s 5 --device {DEVICE} "
             f"--step-mib {step_mib} --interval-s {interval_s} --max-mib {max_mib} --retry-s {retry_s} {creep} --hold "
             f"--report /out/{Path(TRAINER_REPORT).name}", timeout=120)


_SAMPLE = re.compile(r"SGS (\d+\.\d+) (\d+\.\d+) (\d+) (\d+) (\d+) (\d+)")
_KERNEL = re.compile(r"\[\s*(\d+\.\d+)\] (.*(?:Out of memory: Killed process|invoked oom-killer).*)")


def read_console(console: str) -> tuple[list[tuple[float, int, int, int, int]], list[str]]:
    """The samples and the kernel's OOM lines from the node's serial console, as qemu wrote it on the host.

    Read on the host, so a node that hangs still tells its story. A kernel line's uptime becomes host time
    through the nearest sample's (epoch, uptime) pair.
    """
    samples, offsets = [], []
    for match in _SAMPLE.finditer(console):
        epoch, uptime, *values = match.groups()
        samples.append((float(epoch), *(int(v) for v in values)))
        offsets.append((float(uptime), float(epoch) - float(uptime)))
    kernel = []
    for match in _KERNEL.finditer(console):
        uptime = float(match.group(1))
        offset = min(offsets, key=lambda o: abs(o[0] - uptime))[1] if offsets else 0.0
        kernel.append(f"{uptime + offset:.2f} kernel: {match.group(2).strip()}")
    return samples, kernel


def read_back(vm, run: IncidentRun) -> None:
    """Everything the node recorded; a node that does not answer is said to, not waited for."""
    run.samples, run.kernel_kills = read_console(vm.console_log.read_text(errors="replace"))
    try:
        vm.ssh("true", timeout=60, connect_patience=30)
    except Exception as error:  # noqa: BLE001
        run.reachable_at_end = False
        run.notes.append(f"node unreachable at the end: {type(error).__name__}; samples and kernel lines from its "
                         "serial console")
        return
    _, hooks, _ = vm.ssh(f"cat {HOOK_LOG} 2>/dev/null", timeout=60)
    run.hooks = [json.loads(line) for line in hooks.splitlines() if line.strip()]
    # One journalctl per source: matches on different fields (-u is _SYSTEMD_UNIT, -t SYSLOG_IDENTIFIER) are ANDed.
    _, kills, _ = vm.ssh("{ journalctl -q -u earlyoom -u nohang -o short-unix --no-pager; "
                         "journalctl -q -t sparkguard-earlyoom -o short-unix --no-pager; } "
                         "| grep -E 'sending SIG[A-Z]+ to process|killed|signalled' | sort -n || true", timeout=60)
    run.kills = [line for line in kills.splitlines() if line.strip()]
    _, report, _ = vm.ssh(f"cat {TRAINER_REPORT} 2>/dev/null", timeout=60)
    run.trainer_events = [json.loads(line) for line in report.splitlines() if line.strip()]
    _, state, _ = vm.ssh(f"docker inspect -f '{{{{json .State}}}}' {TRAINER} 2>/dev/null", timeout=60)
    try:
        full = json.loads(state)
        run.trainer_state = {k: full.get(k) for k in ("Status", "ExitCode", "OOMKilled")}
    except ValueError:
        run.trainer_state = {"Status": "gone"}
    _, alive, _ = vm.ssh("for u in sg-vllm sg-notebook ssh; do systemctl is-active -q $u && echo $u; done; "
                         "pgrep -x sshd >/dev/null && echo sshd", timeout=60)
    names = alive.split()
    run.survivors = {"vllm": "sg-vllm" in names, "notebook": "sg-notebook" in names, "sshd": "sshd" in names}


def run_incident(vm, arm: str, limit_s: float, term_line_kib: int | None, done=None, creep: str = "") -> IncidentRun:
    """Start the trainer, watch for at most ``limit_s``; ``done(vm)`` ends the watch early (treatment)."""
    run = IncidentRun(arm=arm, limit_s=limit_s, term_line_kib=term_line_kib)
    probe = Probe(vm)
    try:
        time.sleep(5)
        run.started = time.time()
        start_trainer(vm, creep=creep)
        while time.time() - run.started < limit_s:
            time.sleep(5)
            if done is not None and done(vm):
                break
            if arm == "control" and probe.unresponsive_at() and time.time() - run.started > limit_s * 0.9:
                break
    finally:
        probe.close()
    run.probe = probe.samples
    run.longest_gap_s = probe.longest_gap()
    run.unresponsive_at = probe.unresponsive_at()
    run.came_back = probe.answered_after(run.unresponsive_at + UNRESPONSIVE_S) if run.unresponsive_at else None
    read_back(vm, run)
    return run
