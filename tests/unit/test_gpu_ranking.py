"""The GPU ranking agent against recorded nvidia-smi output and a fake /proc tree.

nvidia-smi cannot run here (no GPU). The output strings are recorded formats of
``nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits``:
numbers in MiB, ``[N/A]`` where the driver will not say (GB10 reports it for
some contexts, vGPU guests for all), ``[Not Supported]`` on older boards, an
empty output when no process holds memory, and the human sentence older
drivers print instead. The /proc tree is a directory with the files the agent
reads (comm, cgroup, stat, oom_score_adj, meminfo), so every branch runs
without touching this machine's processes; the sandbox replay runs it against
the real /proc.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sparkguard.domain.memory import victim_order as vo
from sparkguard.roles.earlyoom.files import gpu_ranking as agent
from sparkguard.roles.earlyoom.settings import EarlyoomSettings
from sparkguard.roles.earlyoom.state import ranking_config

MIB = 2**20
TOTAL_KIB = 121 * 2**20          # 121 GiB in /proc/meminfo's kB


@pytest.mark.parametrize("output,holders,problems", [
    ("4242, 81234\n", [(4242, 81234 * MIB)], 0),
    ("4242, 81234\n17, 10\n", [(4242, 81234 * MIB), (17, 10 * MIB)], 0),
    ("4242, [N/A]\n", [(4242, None)], 0),
    ("4242, [Not Supported]\n", [(4242, None)], 0),
    ("", [], 0),
    ("No running processes found\n", [], 0),
    ("\n\n", [], 0),
    ("garbage\n4242, 12\n", [(4242, 12 * MIB)], 1),
    ("4242, 12, extra\n", [], 1),
    ("0, 12\n-5, 12\nabc, 12\n", [], 3),
    ("4242, 12.5\n", [], 1),
    ("4242, lots\n", [], 1),
])
def test_parse_compute_apps(output, holders, problems):
    parsed, unreadable = agent.parse_compute_apps(output)
    assert parsed == holders
    assert len(unreadable) == problems


class FakeProc:
    """A /proc tree with the files the agent reads."""

    def __init__(self, root: Path):
        self.root = root
        (root / "meminfo").write_text(f"MemTotal:       {TOTAL_KIB} kB\nMemFree:        1000 kB\n")

    def add(self, pid: int, comm: str, adj: int, cgroup: str = "0::/user.slice", start: int = 100,
            ppid: int = 1, pgid: int | None = None, fds: tuple[str, ...] = ()) -> None:
        directory = self.root / str(pid)
        directory.mkdir(exist_ok=True)
        (directory / "comm").write_text(comm + "\n")
        (directory / "cgroup").write_text(cgroup + "\n")
        (directory / "fd").mkdir(exist_ok=True)
        for number, target in enumerate(fds):
            (directory / "fd" / str(number + 3)).symlink_to(target)
        fields = ["S", str(ppid), str(pgid if pgid is not None else pid)] + ["0"] * 16 + [str(start)] + ["0"] * 10
        (directory / "stat").write_text(f"{pid} ({comm}) " + " ".join(fields) + "\n")
        (directory / "oom_score_adj").write_text(f"{adj}\n")

    def adj(self, pid: int) -> int:
        return int((self.root / str(pid) / "oom_score_adj").read_text())

    def set_adj(self, pid: int, value: int) -> None:
        (self.root / str(pid) / "oom_score_adj").write_text(f"{value}\n")

    def remove(self, pid: int) -> None:
        shutil.rmtree(self.root / str(pid))


def config(tmp_path: Path, **extra) -> dict:
    values = json.loads(ranking_config(EarlyoomSettings()))
    values.update(status_file=str(tmp_path / "status.json"), textfile=str(tmp_path / "ranking.prom"),
                  jobs_file=str(tmp_path / "jobs"))
    values.update({"device_paths": [], **extra})
    return values


@pytest.fixture()
def proc(tmp_path):
    root = tmp_path / "proc"
    root.mkdir()
    return FakeProc(root)


def ranking(tmp_path, proc) -> agent.Ranking:
    return agent.Ranking(config(tmp_path), str(proc.root))


GIB = 2**30
TOTAL = TOTAL_KIB * 1024

# (comm, adj found, cgroup, GPU memory held) -> adj after one pass
CASES = [
    ("python3 trainer", "python3", 0, "0::/user.slice/session-3.scope", 80 * GIB, vo.holder_adj(80 * GIB, TOTAL)),
    ("docker trainer", "python", 0, "0::/system.slice/docker-ab12.scope", 80 * GIB, vo.holder_adj(80 * GIB, TOTAL)),
    ("unknown comm (a JAX job)", "jaxtrain", 0, "0::/user.slice", 40 * GIB, vo.holder_adj(40 * GIB, TOTAL)),
    ("user look-alike of a training unit", "python3", 0,
     "0::/user.slice/user-1000.slice/user@1000.service/app.slice/sparkguard-job-x.service", 79 * GIB,
     vo.holder_adj(79 * GIB, TOTAL)),
    ("user look-alike of a serving unit", "python3", 0,
     "0::/user.slice/user-1000.slice/user@1000.service/app.slice/sparkguard-vllm@x.service", 79 * GIB,
     vo.holder_adj(79 * GIB, TOTAL)),
    ("user look-alike under the system slice name", "python3", 0,
     "0::/user.slice/system.slice/sparkguard-job-x.service", 79 * GIB, vo.holder_adj(79 * GIB, TOTAL)),
    ("training unit, cgroup v1 hybrid", "python3", 0,
     "12:pids:/system.slice/sparkguard-job-a.service\n1:name=systemd:/system.slice/sparkguard-job-a.service\n0::/",
     80 * GIB, 0),
    ("ollama's unit", "ollama", 0, "0::/system.slice/ollama.service", 70 * GIB, 0),
    ("ollama's runner by name", "ollama", 0, "0::/user.slice", 70 * GIB, 0),
    ("llama.cpp server by name", "llama-server", 0, "0::/user.slice", 40 * GIB, 0),
    ("SGLang scheduler", "sglang::schedul", 0, "0::/user.slice", 40 * GIB, 0),
    ("a server in a unit named like ollama's by a user", "python3", 0,
     "0::/user.slice/user-1000.slice/user@1000.service/app.slice/ollama.service", 40 * GIB,
     vo.holder_adj(40 * GIB, TOTAL)),
    ("memory not reported", "python3", 0, "0::/user.slice", None, vo.HOLDER_BASE_ADJ),
    ("vLLM unit", "VLLM::EngineCor", vo.SERVING_ADJ,
     "0::/system.slice/system-sparkguard\\x2dvllm.slice/sparkguard-vllm@big.service", 50 * GIB, vo.SERVING_ADJ),
    ("vLLM by hand: serving is never raised", "VLLM::EngineCor", 0, "0::/user.slice", 50 * GIB, 0),
    ("marked training", "python3", 1000, "0::/user.slice", 80 * GIB, 1000),
    ("training unit", "python3", 0, "0::/system.slice/sparkguard-job-20261203-101010.service", 80 * GIB, 0),
    ("sshd listed", "sshd", 0, "0::/system.slice/ssh.service", 1 * GIB, 0),
    ("operator protected", "python3", -500, "0::/user.slice", 80 * GIB, -500),
    ("never touches -1000", "python3", -1000, "0::/user.slice", 80 * GIB, -1000),
    ("operator raised higher", "python3", 900, "0::/user.slice", 1 * GIB, 900),
    ("serving set higher by operator", "vllm", 450, "0::/user.slice", 1 * GIB, 450),
]


@pytest.mark.parametrize("comm,found,cgroup,used,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_one_pass_raises_into_the_band_and_never_lowers(tmp_path, proc, comm, found, cgroup, used, expected):
    proc.add(4242, comm, found, cgroup)
    report = ranking(tmp_path, proc).apply([(4242, used)], TOTAL)
    assert proc.adj(4242) == expected
    assert proc.adj(4242) >= found
    assert report[0]["adj"] == expected


def test_no_change_when_already_in_band(tmp_path, proc, capsys):
    proc.add(4242, "python3", vo.holder_adj(80 * GIB, TOTAL))
    rank = ranking(tmp_path, proc)
    rank.apply([(4242, 80 * GIB)], TOTAL)
    assert rank.raised_total == 0
    assert "->" not in capsys.readouterr().err


def test_every_raise_is_logged(tmp_path, proc, capsys):
    proc.add(4242, "python3", 0)
    ranking(tmp_path, proc).apply([(4242, 80 * GIB)], TOTAL)
    assert f"pid 4242 (python3, gpu-holder, {80 * 1024} MiB): oom_score_adj 0 -> 732" in capsys.readouterr().err


def test_value_is_given_back_when_the_process_stops_holding_memory(tmp_path, proc):
    proc.add(4242, "python3", 50)
    rank = ranking(tmp_path, proc)
    rank.apply([(4242, 80 * GIB)], TOTAL)
    assert proc.adj(4242) == 732
    rank.apply([], TOTAL)
    assert proc.adj(4242) == 50


def test_share_changes_follow_the_holder_and_keep_the_operator_floor(tmp_path, proc):
    proc.add(4242, "python3", 650)
    rank = ranking(tmp_path, proc)
    rank.apply([(4242, 1 * GIB)], TOTAL)
    assert proc.adj(4242) == 650                       # the band value (602) is below what was found
    rank.apply([(4242, 100 * GIB)], TOTAL)
    assert proc.adj(4242) == vo.holder_adj(100 * GIB, TOTAL)
    rank.apply([(4242, 1 * GIB)], TOTAL)
    assert proc.adj(4242) == 650                       # back down, never below the operator's value


def test_an_operator_change_after_ours_is_kept(tmp_path, proc):
    proc.add(4242, "python3", 0)
    rank = ranking(tmp_path, proc)
    rank.apply([(4242, 80 * GIB)], TOTAL)
    proc.set_adj(4242, 950)
    rank.apply([], TOTAL)
    assert proc.adj(4242) == 950


def test_a_reused_pid_is_not_given_the_old_process_value(tmp_path, proc):
    proc.add(4242, "python3", 0, start=100)
    rank = ranking(tmp_path, proc)
    rank.apply([(4242, 80 * GIB)], TOTAL)
    proc.remove(4242)
    proc.add(4242, "bash", 732, start=900)             # same PID, another process (same value by chance)
    rank.apply([], TOTAL)
    assert proc.adj(4242) == 732


def test_a_listed_pid_that_has_exited_is_skipped_with_a_log_line(tmp_path, proc, capsys):
    report = ranking(tmp_path, proc).apply([(999, 8 * GIB)], TOTAL)
    assert report == []
    assert "pid 999 listed as a GPU-memory holder has exited; skipped" in capsys.readouterr().err


def test_a_pid_that_exits_between_read_and_write(tmp_path, proc, capsys, monkeypatch):
    proc.add(4242, "python3", 0)
    original = agent.Proc.write_adj

    def exit_first(self, value):
        proc.remove(self.pid)
        return original(self, value)

    monkeypatch.setattr(agent.Proc, "write_adj", exit_first)
    rank = ranking(tmp_path, proc)
    report = rank.apply([(4242, 80 * GIB)], TOTAL)
    assert rank.errors_total == 1 and rank.raised_total == 0
    assert report[0]["adj"] == 0
    assert "pid 4242 (python3): cannot set oom_score_adj 732" in capsys.readouterr().err


def fake_nvidia_smi(tmp_path: Path, body: str) -> str:
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


def run_once(tmp_path, proc, **extra) -> tuple[int, dict, str, str]:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config(tmp_path, **extra)))
    result = subprocess.run([sys.executable, agent.__file__, "--config", str(path), "--once", "--proc",
                             str(proc.root)], capture_output=True, text=True, timeout=30)
    status = json.loads((tmp_path / "status.json").read_text())
    return result.returncode, status, (tmp_path / "ranking.prom").read_text(), result.stderr


def test_agent_once_ranks_and_reports(tmp_path, proc):
    proc.add(4242, "python3", 0)
    proc.add(4343, "VLLM::EngineCor", 0)
    binary = fake_nvidia_smi(tmp_path, "echo '4242, 81920'; echo '4343, [N/A]'; echo '777, 5'")
    rc, status, metrics, _ = run_once(tmp_path, proc, nvidia_smi=binary)
    assert rc == 0 and status["state"] == "ok"
    assert {h["pid"]: (h["class"], h["adj"]) for h in status["holders"]} == {
        4242: ("gpu-holder", vo.holder_adj(80 * GIB, TOTAL)), 4343: ("serving", 0)}
    assert "sparkguard_gpu_ranking_up 1\n" in metrics and "sparkguard_gpu_ranking_holders 2\n" in metrics
    assert "sparkguard_gpu_ranking_raised_total 1\n" in metrics


def test_agent_without_nvidia_smi_says_so_and_succeeds(tmp_path, proc):
    rc, status, metrics, _ = run_once(tmp_path, proc, nvidia_smi=str(tmp_path / "absent" / "nvidia-smi"))
    assert rc == 0 and status["state"] == "no-nvidia-smi"
    assert "sparkguard_gpu_ranking_nvidia_smi 0\n" in metrics and "sparkguard_gpu_ranking_up 0\n" in metrics


def test_agent_failing_nvidia_smi_is_an_error_not_a_crash(tmp_path, proc):
    binary = fake_nvidia_smi(tmp_path, "echo 'NVIDIA-SMI has failed because it could not communicate' >&2; exit 9")
    rc, status, metrics, stderr = run_once(tmp_path, proc, nvidia_smi=binary)
    assert rc == 1 and status["state"] == "error"
    assert "nvidia-smi exited 9: NVIDIA-SMI has failed" in status["detail"]
    assert "sparkguard_gpu_ranking_up 0\n" in metrics and "sparkguard_gpu_ranking_errors_total 1\n" in metrics
    assert "Traceback" not in stderr


def test_agent_malformed_lines_are_counted_and_the_rest_ranked(tmp_path, proc):
    proc.add(4242, "python3", 0)
    binary = fake_nvidia_smi(tmp_path, "echo 'pid, used_memory'; echo '4242, 81920'")
    rc, status, metrics, stderr = run_once(tmp_path, proc, nvidia_smi=binary)
    assert rc == 0 and status["state"] == "ok" and "1 unreadable line(s)" in status["detail"]
    assert proc.adj(4242) == vo.holder_adj(80 * GIB, TOTAL)
    assert "sparkguard_gpu_ranking_errors_total 1\n" in metrics
    assert "nvidia-smi: unreadable line 'pid, used_memory'" in stderr


# --- whole jobs -------------------------------------------------------------------------------------------

def test_the_whole_job_is_ranked_with_its_holder(tmp_path, proc):
    """Forked workers (same process group, inherited descriptors) keep the memory: they rank with the job."""
    proc.add(4242, "python3", 0, pgid=4242, ppid=900)                      # the holder
    proc.add(4243, "pt_data_worker", 0, ppid=4242, pgid=4242)              # DataLoader worker
    proc.add(4244, "python3", 0, ppid=1, pgid=4242)                        # a pool worker whose parent left
    proc.add(4246, "python3", 0, ppid=4243, pgid=4246)                     # a worker's child in its own group
    proc.add(4247, "vllm", 0, ppid=4242, pgid=4242)                        # a server started by the job: its own
    proc.add(4248, "python3", -500, ppid=4242, pgid=4242)                  # an operator's protection: kept
    proc.add(900, "bash", 0, pgid=900)                                     # the shell that started it
    proc.add(5000, "python3", 0, pgid=5000)                                # a notebook elsewhere
    rank = ranking(tmp_path, proc)
    report = rank.apply([(4242, 80 * GIB)], TOTAL)
    band = vo.holder_adj(80 * GIB, TOTAL)
    assert {pid: proc.adj(pid) for pid in (4242, 4243, 4244, 4246, 4247, 4248, 900, 5000)} == {
        4242: band, 4243: band, 4244: band, 4246: band, 4247: 0, 4248: -500, 900: 0, 5000: 0}
    [job] = rank.jobs
    assert job["id"] == "4242:100" and report[0]["job"] == "4242:100"
    assert sorted(member for member, _ in job["members"]) == [4242, 4243, 4244, 4246, 4247, 4248]
    # The job lets go of its memory: every member gets back what it had.
    rank.apply([], TOTAL)
    assert {pid: proc.adj(pid) for pid in (4242, 4243, 4244, 4246)} == {4242: 0, 4243: 0, 4244: 0, 4246: 0}


def test_torchruns_launcher_is_part_of_its_ranks_job(tmp_path, proc):
    """torchrun starts each rank in a session of its own: the launcher is above the rank, not in its group."""
    proc.add(4000, "pt_elastic", 0, pgid=4000, ppid=900)
    proc.add(4242, "python3", 0, ppid=4000, pgid=4242)
    proc.add(4243, "pt_data_worker", 0, ppid=4242, pgid=4242)
    proc.add(900, "bash", 0, pgid=900)
    ranking(tmp_path, proc).apply([(4242, 80 * GIB)], TOTAL)
    band = vo.holder_adj(80 * GIB, TOTAL)
    assert [proc.adj(pid) for pid in (4000, 4242, 4243, 900)] == [band, band, band, 0]


def test_a_container_scope_is_one_job(tmp_path, proc):
    scope = "0::/system.slice/docker-ab12.scope"
    proc.add(4242, "python", 0, cgroup=scope, pgid=4242)
    proc.add(4300, "sh", 0, cgroup=scope, pgid=4300)                       # another session in the container
    proc.add(4400, "python", 0, cgroup="0::/system.slice/docker-cd34.scope", pgid=4400)
    ranking(tmp_path, proc).apply([(4242, 8 * GIB)], TOTAL)
    assert [proc.adj(pid) for pid in (4242, 4300, 4400)] == [vo.holder_adj(8 * GIB, TOTAL)] * 2 + [0]


def test_a_marked_training_job_is_listed_not_touched(tmp_path, proc):
    unit = "0::/system.slice/sparkguard-job-lora.service"
    proc.add(4242, "python3", 1000, cgroup=unit, pgid=4242)
    proc.add(4243, "python3", 1000, cgroup=unit, ppid=4242, pgid=4242)
    rank = ranking(tmp_path, proc)
    rank.apply([(4242, 80 * GIB)], TOTAL)
    assert rank.raised_total == 0 and [proc.adj(4242), proc.adj(4243)] == [1000, 1000]
    assert rank.job_lines(1000.0) == ("4242 100 4242:100 sparkguard-job-lora.service python3\n"
                                      "4243 100 4242:100 sparkguard-job-lora.service python3\n")


def test_a_job_stays_in_the_jobs_file_for_a_while_after_it_is_gone(tmp_path, proc):
    """The guard records a kill only once the victim exited; the agent may have looked in between."""
    proc.add(4242, "python3", 0)
    rank = ranking(tmp_path, proc)
    rank.apply([(4242, 80 * GIB)], TOTAL)
    assert rank.job_lines(1000.0).startswith("4242 100 4242:100 - python3")
    proc.remove(4242)
    rank.apply([], TOTAL)
    assert rank.job_lines(1000.0 + agent.JOB_MEMORY_S - 1).startswith("4242 100")
    assert rank.job_lines(1000.0 + agent.JOB_MEMORY_S + 1) == ""


# --- device descriptors: no window, no nvidia-smi needed, a blind nvidia-smi said ----------------------------

@pytest.fixture()
def device(tmp_path) -> Path:
    path = tmp_path / "nvidia-uvm"          # STAND-IN for /dev/nvidia-uvm: what CUDA opens at init
    path.write_text("")
    return path


def device_config(tmp_path, device, **extra) -> dict:
    return config(tmp_path, device_paths=[str(device)], **extra)


def test_a_device_holder_is_ranked_without_nvidia_smi(tmp_path, proc, device):
    proc.add(4242, "python3", 0, fds=(str(device),))
    proc.add(4243, "python3", 0, ppid=4242, pgid=4242, fds=(str(device),))     # a forked worker
    proc.add(5000, "python3", 0, fds=("/dev/null",))
    rank = agent.Ranking(device_config(tmp_path, device), str(proc.root))
    state, detail, report, devices = agent.one_pass(rank, None)
    assert state == "no-nvidia-smi" and devices == 2 and "2 device holder(s)" in detail
    assert [proc.adj(pid) for pid in (4242, 4243, 5000)] == [vo.HOLDER_BASE_ADJ] * 2 + [0]


def test_a_device_open_ranks_at_once_and_never_gives_back(tmp_path, proc, device):
    """The pass a device open wakes: it has not asked nvidia-smi, so it only raises."""
    proc.add(4242, "python3", 0, fds=(str(device),))
    proc.add(5000, "python3", 0)
    rank = agent.Ranking(device_config(tmp_path, device), str(proc.root))
    rank.apply([(5000, 10 * GIB)], TOTAL)
    rank.device_pass(TOTAL)
    assert proc.adj(4242) == vo.HOLDER_BASE_ADJ
    assert proc.adj(5000) == vo.holder_adj(10 * GIB, TOTAL)              # not given back by the device pass


def test_nvidia_smi_listing_no_one_while_devices_are_held_is_blind(tmp_path, proc, device):
    """Jetson Orin's nvidia-smi lists no process at all: the audit must not be green then."""
    proc.add(4242, "python3", 0, fds=(str(device),))
    binary = fake_nvidia_smi(tmp_path, "echo 'No running processes found'")
    rc, status, metrics, _ = run_once(tmp_path, proc, nvidia_smi=binary, device_paths=[str(device)], blind_after_s=0)
    assert rc == 0 and status["state"] == "blind" and "pid 4242" in status["detail"]
    assert proc.adj(4242) == vo.HOLDER_BASE_ADJ                           # still ranked, by its descriptor
    assert "sparkguard_gpu_ranking_blind 1\n" in metrics and "sparkguard_gpu_ranking_up 0\n" in metrics
    assert "sparkguard_gpu_ranking_device_holders 1\n" in metrics
    from sparkguard.roles.earlyoom.audit import gpu_ranking_verdict
    ok, actual = gpu_ranking_verdict(json.dumps(status), str(status["time"]))
    assert not ok and "blind" in actual


def test_a_device_held_briefly_is_not_yet_blind(tmp_path, proc, device):
    proc.add(4242, "python3", 0, fds=(str(device),))
    binary = fake_nvidia_smi(tmp_path, "true")
    rc, status, _, _ = run_once(tmp_path, proc, nvidia_smi=binary, device_paths=[str(device)], blind_after_s=30)
    assert status["state"] == "ok"


def test_the_agent_wakes_on_a_device_open_and_ranks_before_its_next_pass(tmp_path, proc, device):
    """inotify IN_OPEN on the device: a fast start is ranked within a second, not at the next interval (60 s)."""
    proc.add(4242, "python3", 0)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(device_config(tmp_path, device, interval_s=60, nvidia_smi="/absent/nvidia-smi")))
    running = subprocess.Popen([sys.executable, agent.__file__, "--config", str(path), "--proc", str(proc.root)],
                               stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 10
        while not (tmp_path / "status.json").exists() and time.time() < deadline:
            time.sleep(0.05)
        assert proc.adj(4242) == 0
        (proc.root / "4242" / "fd" / "3").symlink_to(device)                  # the trainer's CUDA init ...
        with open(device):                                                     # ... opens the device
            pass
        jobs = tmp_path / "jobs"
        deadline = time.time() + 3
        # The pass raises the adj, then writes the jobs file: wait for both (a loaded CI machine read the
        # file between the two).
        while time.time() < deadline and (proc.adj(4242) == 0 or "python3" not in
                                          (jobs.read_text() if jobs.exists() else "")):
            time.sleep(0.05)
        assert proc.adj(4242) == vo.HOLDER_BASE_ADJ
        assert "4242 100 4242:100 - python3" in jobs.read_text()
    finally:
        running.terminate()
        running.wait(timeout=10)


def test_a_watched_scan_reads_again_only_holders_and_new_processes_until_a_device_is_opened(tmp_path, proc, device):
    """The cached scan: a process seen holding no device is not read again until a watched device is opened."""
    for pid in range(100, 130):
        proc.add(pid, "bash", 0, fds=("/dev/null",) * 5)
    proc.add(4242, "python3", 0, fds=(str(device),))
    scan = agent.DeviceScan(str(proc.root))
    assert scan.holders({str(device)}, watched=True) == {4242} and scan.read_last == 31
    assert scan.holders({str(device)}, watched=True) == {4242} and scan.read_last == 1       # the holder only
    proc.add(4243, "python3", 0, ppid=4242, pgid=4242, fds=(str(device),))                  # a forked worker
    assert scan.holders({str(device)}, watched=True) == {4242, 4243} and scan.read_last == 2
    (proc.root / "100" / "fd" / "9").symlink_to(device)                                     # 100 opens it ...
    scan.opened()                                                                            # ... IN_OPEN
    assert scan.holders({str(device)}, watched=True) == {100, 4242, 4243} and scan.read_last == 32
    proc.remove(4242)
    assert scan.holders({str(device)}, watched=True) == {100, 4243}


def test_a_reused_pid_is_a_new_process_to_the_scan(tmp_path, proc, device):
    """Same PID, another process (a new /proc/PID inode): read again, whatever the cache says of the old one."""
    proc.add(300, "bash", 0)
    scan = agent.DeviceScan(str(proc.root))
    assert scan.holders({str(device)}, watched=True) == set()
    (tmp_path / "staging").mkdir()
    newer = FakeProc(tmp_path / "staging")
    newer.add(300, "python3", 0, fds=(str(device),))          # made while the old one still exists: another inode
    proc.remove(300)
    (newer.root / "300").rename(proc.root / "300")
    assert scan.holders({str(device)}, watched=True) == {300}


def test_without_a_watch_or_every_few_passes_the_scan_reads_every_process(tmp_path, proc, device):
    for pid in range(100, 110):
        proc.add(pid, "bash", 0)
    scan = agent.DeviceScan(str(proc.root))
    scan.passes = 1                                  # not the periodic full scan
    for _ in range(3):
        scan.holders({str(device)}, watched=False)
        assert scan.read_last == 10
    # What an unwatched pass saw is not trusted once the watch is up: an open meanwhile sent no event.
    (proc.root / "100" / "fd" / "3").symlink_to(device)
    assert scan.holders({str(device)}, watched=True) == {100}
    scan = agent.DeviceScan(str(proc.root))
    reads = []
    for _ in range(2 * agent.DeviceScan.FULL_EVERY):
        scan.holders({str(device)}, watched=True)
        reads.append(scan.read_last)
    assert reads == ([10] + [1] * (agent.DeviceScan.FULL_EVERY - 1)) * 2     # a full scan every FULL_EVERY passes
    assert scan.holders({str(device), "/dev/kfd"}, watched=True) == {100} and scan.read_last == 10  # a new device
