"""The replays' stand-in nvidia-smi (tests/replay.py FAKE_NVIDIA_SMI) against a fake /proc.

STAND-IN: it reports each process's hugetlb memory (the replays' "driver memory") in the format of
`nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits`. The GPU ranking agent
parses that format, so a stand-in that drifts from it would blind the agent in every replay.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.replay import FAKE_NVIDIA_SMI, MIB, OLLAMA_MAX_MIB, TRAINER_SHARE_MIB, ReplayPlan, _ollama_share

STATUS = "Name:\t{name}\nPid:\t{pid}\nVmRSS:\t    5000 kB\nHugetlbPages:\t{kib:>8} kB\nThreads:\t1\n"


def test_each_process_holding_huge_pages_is_listed_in_nvidia_smis_format(tmp_path):
    proc = tmp_path / "proc"
    for pid, kib in ((123, 2048), (77, 0), (4096, 1048576)):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "status").write_text(STATUS.format(name="python3", pid=pid, kib=kib))
    (proc / "self").mkdir()       # not a PID: never read
    (proc / "self" / "status").write_text(STATUS.format(name="x", pid=1, kib=4096))
    (proc / "999").mkdir()        # a process that exited between the glob and the read
    script = tmp_path / "nvidia-smi"
    script.write_text(FAKE_NVIDIA_SMI)
    done = subprocess.run(["sh", str(script), "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, env={**os.environ, "SG_PROC_ROOT": str(proc)})
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == ["123, 2", "4096, 1024"]


def test_ollama_is_sized_so_the_trainer_crosses_holding_its_share_and_ollama_holds_more():
    """The ollama cell sizes its stand-in from the host's MemAvailable at the cell, not the module's plan.

    CI's host drifted ~350 MiB below the plan by the ollama cell: a fixed 768 MiB ollama left the trainer
    crossing the line with 160 MiB, its kill did not lift the node back over the line, and earlyoom went on
    to the vLLM stand-in.
    """
    plan = ReplayPlan(mem_total_kib=24 * 1024 * 1024, mem_available_kib=23 * 1024 * 1024)
    line = plan.term_line_kib
    for drift_mib in (0, 200, 350, 400):
        available = line + (plan.term_after_bytes // MIB - drift_mib) * 1024
        share = _ollama_share(plan, available)
        room = (available - line) // 1024
        assert share % 64 == 0 and TRAINER_SHARE_MIB < share <= OLLAMA_MAX_MIB
        assert TRAINER_SHARE_MIB <= room - share < TRAINER_SHARE_MIB + 64   # the trainer crosses holding its share
    with pytest.raises(AssertionError, match="too little for ollama to hold more"):
        _ollama_share(plan, line + 600 * 1024)


def test_the_ollama_cell_sizes_again_when_the_host_moved_after_it_was_sized(monkeypatch):
    """CI, 2026-12-07: memory still coming back from the previous cell after ollama was sized left the
    trainer crossing with as much as ollama held (640 MiB each). The room is read again once ollama holds
    its share; out of range, ollama is stopped and sized again."""
    from tests import replay

    plan = ReplayPlan(mem_total_kib=24 * 1024 * 1024, mem_available_kib=23 * 1024 * 1024)
    line = plan.term_line_kib
    readings = iter([line + 1280 * 1024, line + 640 * 1024 + 300 * 1024,    # sized 960; then 940 MiB of room
                     line + 1280 * 1024, line + 320 * 1024])                 # sized 960; then 320: as meant
    monkeypatch.setattr(replay, "settled_mem_available_kib", lambda: next(readings))
    commands: list[str] = []

    def ssh(command):
        commands.append(command)
        return 0, "", ""

    assert replay._start_sized_ollama(ssh, plan) == 960
    assert sum("--max-mib 960" in c for c in commands) == 2 and sum("systemctl stop ollama" in c for c in commands) == 1
    stuck = iter([line + 1280 * 1024, line + 960 * 1024] * 3)
    monkeypatch.setattr(replay, "settled_mem_available_kib", lambda: next(stuck))
    with pytest.raises(AssertionError, match="kept moving"):
        replay._start_sized_ollama(ssh, plan)


def test_a_failed_cell_says_how_much_host_memory_the_job_does_not_explain():
    """The host lost 600 MiB during the cell while the job's huge pages all came back: explain() says 600."""
    from tests.replay import HostSampler

    sampler = HostSampler.__new__(HostSampler)   # no thread: samples given
    sampler.samples = [(10.0, 0, 11_440 * 1024), (10.5, 192, 11_056 * 1024), (11.0, 0, 10_840 * 1024)]
    text = sampler.explain(since=10.5)
    assert "11440 MiB when the trainer started" in text and "11056 MiB at the first signal" in text
    assert "lowest 10840 MiB" in text and "fallen by 600 MiB more" in text
    # Still holding its pages at the end: those are the job's, not unexplained.
    sampler.samples[-1] = (11.0, 192, 11_056 * 1024 - 600 * 1024)
    assert "fallen by 600 MiB more" in sampler.explain(since=10.5)


def test_meminfo_fields_come_from_one_read():
    from tests.replay import meminfo_kib, meminfo_kib_of

    total, surplus = meminfo_kib_of(("MemTotal", "HugePages_Surp"))
    assert total == meminfo_kib("MemTotal") and surplus >= 0


def test_the_fast_start_stops_between_the_sigterm_and_the_sigkill_lines():
    from tests.replay import FAST_STEP_MIB, Launch, _hog_command, fast_stop_below_mib

    plan = ReplayPlan(mem_total_kib=24_683_772, mem_available_kib=23_639_496)
    stop = fast_stop_below_mib(plan)
    # The hog stops after the first step that takes MemAvailable below ``stop``: it lands up to a step further.
    deepest, shallowest = stop - FAST_STEP_MIB, stop
    assert plan.term_line_kib // 1024 - 256 <= shallowest <= plan.term_line_kib // 1024 - 64
    assert deepest >= plan.kill_line_kib // 1024 + 64, "a fast start that lands past SIGKILL's line is no SIGTERM cell"
    fast = Launch(name="fast", command="{hog}", comm="python3", host_cgroup=False, marked=False, record=False,
                  shape="", fast=True)
    command = _hog_command(fast, plan)
    assert f"--stop-below-mib {stop} " in command and "--interval-s 0 " in command
    assert f"--max-mib {plan.hog_cap_mib} " in command
