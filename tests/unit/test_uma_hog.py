"""tools/sparkguard-uma-hog run for real: the job shapes the incident replays stand a trainer in with.

The hog is a STAND-IN for a CUDA trainer on a unified-memory node: it holds
hugetlb pages (outside VmRSS and every memory cgroup) as the NVIDIA driver holds
its allocations. These tests run the script as a subprocess with small sizes
(at most 64 MiB of huge pages per test) and read what a guard would see:
/proc/PID/status, /proc/PID/fd, process groups and sessions, and the host's
HugePages_Surp, which counts exactly the surplus huge pages the hog holds.

Surplus huge pages need the host's /proc/sys/vm/nr_overcommit_hugepages: the
module raises it under the lock tests/replay.py takes (so it never runs during
a replay) and writes back the exact value it found. Without root, the knob or
hugetlb memfds the tests skip, saying why.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.replay import HUGEPAGE_LOCK
from tests.waiting import wait_for

REPO = Path(__file__).resolve().parents[2]
HOG = REPO / "tools" / "sparkguard-uma-hog"
KNOB = Path("/proc/sys/vm/nr_overcommit_hugepages")
BUDGET_PAGES = 40          # 80 MiB: each test takes at most 64 MiB
LOCK_WAIT_S = 90           # a replay holds the lock for minutes: skip (before the 120 s timeout) rather than hang
HUGE_KIB = 2048

pytestmark = pytest.mark.timeout(120)


def _probe_hugetlb_memfd() -> None:
    """One 2 MiB page through a hugetlb memfd, as the hog takes them; OSError if the host will not give it."""
    fd = os.memfd_create("sparkguard-test-probe", os.MFD_CLOEXEC | os.MFD_HUGETLB)
    try:
        os.ftruncate(fd, HUGE_KIB * 1024)
        m = mmap.mmap(fd, HUGE_KIB * 1024, flags=mmap.MAP_SHARED)
        m[0] = 1
        m.close()
    finally:
        os.close(fd)


@pytest.fixture(scope="module")
def hugepages():
    """BUDGET_PAGES more surplus huge pages for this module, under the replays' lock; the knob restored exactly."""
    if os.geteuid() != 0:
        pytest.skip("surplus huge pages need root (writes /proc/sys/vm/nr_overcommit_hugepages)")
    if not KNOB.exists() or not hasattr(os, "MFD_HUGETLB"):
        pytest.skip("this kernel or Python has no hugetlb (no nr_overcommit_hugepages or MFD_HUGETLB)")
    with open(HUGEPAGE_LOCK, "w") as lock:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.skip(f"{HUGEPAGE_LOCK} held by another run (a replay?) for {LOCK_WAIT_S} s")
                time.sleep(0.5)
        original = KNOB.read_text().strip()
        try:
            KNOB.write_text(str(int(original) + BUDGET_PAGES))
            try:
                _probe_hugetlb_memfd()
            except OSError as e:
                pytest.skip(f"no hugetlb memfd page to be had here: {e}")
            yield
        finally:
            KNOB.write_text(original)


def meminfo(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def status(pid: int, key: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split(":", 1)[1].strip()
    raise KeyError(key)


def status_kib(pid: int, key: str) -> int:
    return int(status(pid, key).split()[0])


def comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def alive(pid: int) -> bool:
    """Running, not gone and not a zombie (an orphan's zombie waits for PID 1 to reap it, holding nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def fd_targets(pid: int) -> list[str]:
    targets = []
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            targets.append(os.readlink(fd))
        except FileNotFoundError:
            pass
    return targets


def wait_until(what: str, predicate, timeout: float = 5.0, every: float = 0.02):
    return wait_for(predicate, timeout, what, every)


class Hog:
    """One run of the script: its own session and process group, its report, what it started."""

    def __init__(self, args: list[str], report: Path):
        self.report = report
        self.proc = subprocess.Popen([sys.executable, str(HOG), *args, "--report", str(report)],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)

    def events(self, name: str | None = None) -> list[dict]:
        if not self.report.exists():
            return []
        found = [json.loads(line) for line in self.report.read_text().splitlines() if line.strip()]
        return [e for e in found if name is None or e["event"] == name]

    def wait_event(self, name: str, count: int = 1, timeout: float = 5.0) -> list[dict]:
        def seen():
            if self.proc.poll() is not None and len(self.events(name)) < count:
                raise AssertionError(f"the hog exited {self.proc.returncode} before {name}: {self.proc.stderr.read()!r}")
            return self.events(name) if len(self.events(name)) >= count else None
        return wait_until(f"{count} {name} event(s)", seen, timeout)

    def helper_pids(self) -> list[int]:
        return [e["pid"] for e in self.events("helper-start")]

    def every_pid(self) -> list[int]:
        return [self.proc.pid, *(e["pid"] for e in self.events() if e["event"] in ("start", "helper-start"))]

    def kill_all(self) -> None:
        """SIGKILL every process group this run made (the hog's, a rank's) and wait until all are gone."""
        groups = {self.proc.pid, *(e["rank_pgid"] for e in self.events("rank-started"))}
        for pgid in groups:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=10)
        self.proc.stdout.close()
        self.proc.stderr.close()
        wait_until("every process of the hog gone", lambda: not any(alive(p) for p in self.every_pid()), 10)


@pytest.fixture
def surp_before(hugepages) -> int:
    """HugePages_Surp before the test; the test's processes are killed afterwards and the pages checked back."""
    before = meminfo("HugePages_Surp")
    yield before
    wait_until("the surplus huge pages back", lambda: meminfo("HugePages_Surp") <= before, 10)


@pytest.fixture
def start_hog(tmp_path):
    started: list[Hog] = []

    def start(*args: str) -> Hog:
        hog = Hog(list(args), tmp_path / f"report{len(started)}.jsonl")
        started.append(hog)
        return hog

    yield start
    for hog in started:
        hog.kill_all()


def run_usage_error(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HOG), *args], capture_output=True, text=True, timeout=30)


def test_memfd_holds_hugetlb_pages_through_a_memfd_outside_vmrss(surp_before, start_hog):
    hog = start_hog("--memfd", "--step-mib", "16", "--max-mib", "48", "--interval-s", "0.05", "--hold")
    hog.wait_event("max-reached")
    pid = hog.proc.pid
    assert status_kib(pid, "HugetlbPages") == 48 * 1024
    assert status_kib(pid, "VmRSS") < 48 * 1024, "the driver-like memory must not be in VmRSS"
    assert meminfo("HugePages_Surp") >= surp_before + 24
    # One memfd descriptor, whatever the number of steps, and the mappings are of it.
    assert [t for t in fd_targets(pid) if t.startswith("/memfd:")] == ["/memfd:sparkguard-uma-hog (deleted)"]
    assert "/memfd:sparkguard-uma-hog" in Path(f"/proc/{pid}/maps").read_text()
    assert [e["allocated_mib"] for e in hog.events("step")] == [16, 32, 48]
    hog.proc.send_signal(signal.SIGTERM)
    assert hog.proc.wait(timeout=5) == 143
    assert hog.events("sigterm")[0]["allocated_mib"] == 48
    wait_until("the pages back once the only holder is gone", lambda: meminfo("HugePages_Surp") <= surp_before)


def test_unmapped_holds_the_pages_through_the_descriptor_alone(surp_before, start_hog):
    """--unmapped (arm64 under qemu user emulation): the pages are allocated and held with no mapping at all."""
    hog = start_hog("--memfd", "--unmapped", "--step-mib", "16", "--max-mib", "32", "--interval-s", "0.05", "--hold")
    hog.wait_event("max-reached")
    pid = hog.proc.pid
    assert meminfo("HugePages_Surp") >= surp_before + 16, "fallocate alone must take the huge pages"
    assert status_kib(pid, "HugetlbPages") == 0
    assert "/memfd:" not in Path(f"/proc/{pid}/maps").read_text()
    assert [t for t in fd_targets(pid) if t.startswith("/memfd:")] == ["/memfd:sparkguard-uma-hog (deleted)"]
    assert [e["allocated_mib"] for e in hog.events("step")] == [16, 32]
    hog.proc.send_signal(signal.SIGTERM)
    assert hog.proc.wait(timeout=5) == 143
    wait_until("the pages back once the descriptor is closed", lambda: meminfo("HugePages_Surp") <= surp_before)


def test_unmapped_without_memfd_is_a_usage_error():
    done = run_usage_error("--unmapped", "--max-mib", "2")
    assert done.returncode == 2
    assert "--memfd" in done.stderr


def test_helpers_keep_the_memory_after_the_main_process_dies_until_they_leave(surp_before, start_hog):
    hog = start_hog("--memfd", "--step-mib", "8", "--max-mib", "16", "--interval-s", "0.05", "--hold",
                    "--helpers", "2", "--helper-comm", "pt_data_worker", "--helper-watch-s", "0.2", "--helper-linger-s", "0.5")
    hog.wait_event("helper-start", count=2)
    hog.wait_event("max-reached")
    pid = hog.proc.pid
    helpers = hog.helper_pids()
    assert len(set(helpers)) == 2
    for helper in helpers:
        assert comm(helper) == "pt_data_worker"
        assert os.getpgid(helper) == os.getpgid(pid)
        assert status(helper, "PPid") == str(pid)
        assert status_kib(helper, "HugetlbPages") == 0, "a helper keeps only the descriptor, no mapping"
        assert "/memfd:" not in Path(f"/proc/{helper}/maps").read_text()
        assert any(t.startswith("/memfd:sparkguard-uma-hog") for t in fd_targets(helper))
    assert status_kib(pid, "HugetlbPages") == 16 * 1024
    assert meminfo("HugePages_Surp") >= surp_before + 8
    time.sleep(0.8)  # longer than watch + linger: a helper stays while its parent lives
    assert all(alive(h) for h in helpers)

    hog.proc.send_signal(signal.SIGTERM)
    assert hog.proc.wait(timeout=5) == 143
    died = time.monotonic()
    held = []
    while any(alive(h) for h in helpers):
        held.append(meminfo("HugePages_Surp"))
        assert time.monotonic() - died < 5, "the helpers must leave within watch + linger seconds"
        time.sleep(0.02)
    assert held and min(held) >= surp_before + 8, "the pages stay allocated while any helper holds the memfd"
    wait_until("the pages back once the helpers left", lambda: meminfo("HugePages_Surp") <= surp_before, 3)
    exits = hog.events("helper-exit")
    assert sorted(e["pid"] for e in exits) == sorted(helpers)
    assert {e["reason"] for e in exits} == {"parent-gone"}
    # The linger by the helpers' own clock: this process's view of when the parent died lags whenever a
    # loaded runner deschedules it (the likely cause of this test's one failure in a parallel unit tier).
    orphaned = {e["pid"]: e["t"] for e in hog.events("helper-orphaned")}
    assert sorted(orphaned) == sorted(helpers)
    assert all(e["t"] - orphaned[e["pid"]] >= 0.5 - 0.01 for e in exits), (orphaned, exits)


def test_sigterm_kills_a_helper_silently_and_the_hog_reaps_it(surp_before, start_hog):
    hog = start_hog("--memfd", "--step-mib", "8", "--max-mib", "8", "--interval-s", "0", "--hold", "--helpers", "2")
    first, second = (e["pid"] for e in hog.wait_event("helper-start", count=2))
    os.kill(first, signal.SIGTERM)
    reaped = hog.wait_event("helper-reaped")
    assert reaped == [{**reaped[0], "helper_pid": first, "status": -signal.SIGTERM}]
    assert not alive(first)
    assert alive(second) and hog.proc.poll() is None
    assert hog.events("helper-exit") == []


def test_device_is_opened_before_the_first_allocation_and_inherited_by_the_helpers(surp_before, start_hog, tmp_path):
    device = tmp_path / "nvidia-uvm"   # the stand-in for /dev/nvidia-uvm
    device.write_text("")
    hog = start_hog("--memfd", "--device", str(device), "--step-mib", "8", "--max-mib", "8", "--interval-s", "0",
                    "--hold", "--helpers", "1")
    (helper,) = (e["pid"] for e in hog.wait_event("helper-start"))
    assert str(device) in fd_targets(hog.proc.pid)
    assert str(device) in fd_targets(helper)
    names = [e["event"] for e in hog.events()]
    assert names.index("device-opened") < names.index("step")
    assert hog.events("device-opened")[0]["path"] == str(device)


@pytest.mark.parametrize("shape", [[], ["--torchrun"]], ids=["hog", "torchrun"])
def test_a_missing_device_is_a_usage_error(tmp_path, shape):
    # Under --torchrun too: refused before the agent starts a rank (not a rank that dies, agent exit 1).
    done = run_usage_error(*shape, "--memfd", "--device", str(tmp_path / "no-such-device"), "--max-mib", "2")
    assert done.returncode == 2
    assert "no-such-device" in done.stderr
    assert "usage:" in done.stderr


def test_helpers_without_memfd_is_a_usage_error():
    done = run_usage_error("--helpers", "2", "--max-mib", "2")
    assert done.returncode == 2
    assert "--memfd" in done.stderr


def start_torchrun(start_hog) -> tuple[Hog, int, list[int]]:
    """torchrun with one rank holding a memfd and two DataLoader workers: the hog, the rank pid, the helpers."""
    hog = start_hog("--torchrun", "--comm", "python3", "--memfd", "--step-mib", "8", "--max-mib", "16",
                    "--interval-s", "0.05", "--hold", "--helpers", "2", "--helper-comm", "pt_data_worker")
    helpers = [e["pid"] for e in hog.wait_event("helper-start", count=2)]
    hog.wait_event("max-reached")
    (rank,) = (e["pid"] for e in hog.events("start"))
    return hog, rank, helpers


def test_torchrun_puts_the_rank_and_its_workers_in_their_own_session(surp_before, start_hog):
    hog, rank, helpers = start_torchrun(start_hog)
    agent = hog.proc.pid
    assert comm(agent) == "pt_elastic"
    assert [e["pid"] for e in hog.events("agent-start")] == [agent]
    assert comm(rank) == "python3"
    assert status(rank, "PPid") == str(agent)
    assert os.getsid(rank) == rank != os.getsid(agent)
    assert os.getpgid(rank) == rank != os.getpgid(agent)
    assert [os.getpgid(h) for h in helpers] == [rank, rank]
    assert status_kib(rank, "HugetlbPages") == 16 * 1024
    assert status_kib(agent, "HugetlbPages") == 0, "the agent holds nothing"


def test_sigterm_to_the_agent_ends_the_whole_tree(surp_before, start_hog):
    hog, rank, helpers = start_torchrun(start_hog)
    hog.proc.send_signal(signal.SIGTERM)
    assert hog.proc.wait(timeout=5) == 143
    assert not any(alive(p) for p in (rank, *helpers))
    assert [e["pid"] for e in hog.events("sigterm")] == [rank]
    (done,) = hog.events("agent-exit")
    assert (done["reason"], done["rank_status"]) == ("sigterm", 143)
    assert hog.events("agent-sigterm")
    wait_until("the pages back", lambda: meminfo("HugePages_Surp") <= surp_before, 3)


def test_a_rank_that_exits_makes_the_agent_stop_its_group_and_exit_1(surp_before, start_hog):
    hog, rank, helpers = start_torchrun(start_hog)
    os.kill(rank, signal.SIGTERM)
    assert hog.proc.wait(timeout=5) == 1
    (done,) = hog.events("agent-exit")
    assert (done["reason"], done["rank_status"]) == ("rank-exited", 143)
    # The workers watch their parent only every 5 s: the agent's SIGTERM to the group ends them sooner.
    wait_until("the rank's workers gone", lambda: not any(alive(h) for h in helpers), 2)
    assert hog.events("helper-exit") == []
    wait_until("the pages back", lambda: meminfo("HugePages_Surp") <= surp_before, 3)


def test_fast_start_takes_everything_at_once_and_samples_while_holding(surp_before, start_hog):
    # The plain shape (anonymous MAP_HUGETLB) as the replays run it, with --interval-s 0.
    hog = start_hog("--comm", "python3", "--step-mib", "8", "--max-mib", "24", "--interval-s", "0", "--sample-ms", "50",
                    "--hold")
    hog.wait_event("sample", count=3)
    names = [e["event"] for e in hog.events()]
    assert names[:5] == ["start", "step", "step", "step", "max-reached"]
    assert set(names[5:]) == {"sample"}
    steps = hog.events("step")
    assert steps[-1]["t"] - hog.events("start")[0]["t"] < 1.0
    assert status_kib(hog.proc.pid, "HugetlbPages") == 24 * 1024
    hog.proc.send_signal(signal.SIGTERM)
    assert hog.proc.wait(timeout=5) == 143
    assert hog.events("sigterm")[0]["allocated_mib"] == 24


def test_retry_s_retries_each_huge_page_then_reports_the_retries(surp_before, start_hog):
    """Past the module's budget every page is refused (ENOMEM): with --retry-s the hog keeps asking for that
    long, page by page (fallocate), before it reports alloc-failed with the count; without it, at once."""
    budget_mib = BUDGET_PAGES * HUGE_KIB // 1024
    patient = start_hog("--memfd", "--step-mib", "16", "--max-mib", str(budget_mib + 64), "--interval-s", "0",
                        "--retry-s", "0.6", "--hold")
    [failed] = patient.wait_event("alloc-failed", timeout=30)
    started = patient.events("start")[0]["t"]
    assert failed["retries"] >= 3 and failed["t"] - started >= 0.6, failed
    # Whole steps only are kept (the file never holds more than is mapped), as much as the budget allowed.
    assert failed["allocated_mib"] % 16 == 0 and 0 < failed["allocated_mib"] <= budget_mib, failed
    assert status_kib(patient.proc.pid, "HugetlbPages") == failed["allocated_mib"] * 1024
    patient.kill_all()
    wait_until("the surplus huge pages back", lambda: meminfo("HugePages_Surp") <= surp_before, 10)
    hasty = start_hog("--memfd", "--step-mib", "16", "--max-mib", str(budget_mib + 64), "--interval-s", "0", "--hold")
    [failed] = hasty.wait_event("alloc-failed", timeout=30)
    assert failed["retries"] == 0, failed
    assert run_usage_error("--retry-s", "-1").returncode == 2


def test_slow_below_switches_to_the_seeds_creep_once_memory_is_short(surp_before, start_hog):
    """--slow-below-mib above what is available now: the first step is fast, every later one slow."""
    above = meminfo("MemAvailable") // 1024 + 1024
    hog = start_hog("--memfd", "--step-mib", "8", "--max-mib", "32", "--interval-s", "0",
                    "--slow-below-mib", str(above), "--slow-step-mib", "2", "--slow-interval-s", "0.3",
                    "--slow-for-mib", "6", "--hold")
    hog.wait_event("max-reached", timeout=10)
    [slow], [fast] = hog.events("slow"), hog.events("fast")
    steps = hog.events("step")
    assert slow["allocated_mib"] == 0 and fast["allocated_mib"] == 6
    assert [e["allocated_mib"] for e in steps] == [2, 4, 6, 14, 22, 30, 32]     # creep 6 MiB, then 8 MiB steps
    assert steps[2]["t"] - steps[1]["t"] >= 0.25
    assert run_usage_error("--slow-step-mib", "0").returncode == 2


def test_stop_below_ends_the_growth_once_memory_is_short(surp_before, start_hog):
    """--stop-below-mib above what is available now: one step, then it holds, and says why it stopped."""
    above = meminfo("MemAvailable") // 1024 + 1024
    hog = start_hog("--memfd", "--step-mib", "8", "--max-mib", "32", "--interval-s", "0",
                    "--stop-below-mib", str(above), "--hold")
    [stopped] = hog.wait_event("stop-below-reached", timeout=10)
    assert stopped["allocated_mib"] == 8 and not hog.events("max-reached"), hog.events()
    assert [e["allocated_mib"] for e in hog.events("step")] == [8]
    assert status_kib(hog.proc.pid, "HugetlbPages") == 8 * 1024, "it holds what it took"
    # Far below what is available: the cap ends it, as without the option.
    capped = start_hog("--memfd", "--step-mib", "8", "--max-mib", "16", "--interval-s", "0",
                       "--stop-below-mib", "1", "--hold")
    [reached] = capped.wait_event("max-reached", timeout=10)
    assert reached["allocated_mib"] == 16 and not capped.events("stop-below-reached")
    assert run_usage_error("--stop-below-mib", "-1").returncode == 2
