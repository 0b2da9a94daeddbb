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
from pathlib import Path

import pytest

from roles.earlyoom import gpu_ranking as agent
from roles.earlyoom.settings import EarlyoomSettings
from roles.earlyoom.state import ranking_config
from sparkguard import victim_order as vo

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

    def add(self, pid: int, comm: str, adj: int, cgroup: str = "0::/user.slice", start: int = 100) -> None:
        directory = self.root / str(pid)
        directory.mkdir(exist_ok=True)
        (directory / "comm").write_text(comm + "\n")
        (directory / "cgroup").write_text(cgroup + "\n")
        fields = ["S"] + ["0"] * 18 + [str(start)] + ["0"] * 10
        (directory / "stat").write_text(f"{pid} ({comm}) " + " ".join(fields) + "\n")
        (directory / "oom_score_adj").write_text(f"{adj}\n")

    def adj(self, pid: int) -> int:
        return int((self.root / str(pid) / "oom_score_adj").read_text())

    def set_adj(self, pid: int, value: int) -> None:
        (self.root / str(pid) / "oom_score_adj").write_text(f"{value}\n")

    def remove(self, pid: int) -> None:
        shutil.rmtree(self.root / str(pid))


def config(tmp_path: Path, **extra) -> dict:
    values = json.loads(ranking_config(EarlyoomSettings(), vo.SERVING_ADJ))
    values.update(status_file=str(tmp_path / "status.json"), textfile=str(tmp_path / "ranking.prom"), **extra)
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
    ("llama-server", "llama-server", 0, "0::/user.slice", 40 * GIB, vo.holder_adj(40 * GIB, TOTAL)),
    ("memory not reported", "python3", 0, "0::/user.slice", None, vo.HOLDER_BASE_ADJ),
    ("vLLM unit", "VLLM::EngineCor", vo.SERVING_ADJ,
     "0::/system.slice/system-sparkguard\\x2dvllm.slice/sparkguard-vllm@big.service", 50 * GIB, vo.SERVING_ADJ),
    ("vLLM by hand", "VLLM::EngineCor", 0, "0::/user.slice", 50 * GIB, vo.SERVING_ADJ),
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
    assert "pid 999 listed by nvidia-smi has exited; skipped" in capsys.readouterr().err


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
        4242: ("gpu-holder", vo.holder_adj(80 * GIB, TOTAL)), 4343: ("serving", vo.SERVING_ADJ)}
    assert "sparkguard_gpu_ranking_up 1\n" in metrics and "sparkguard_gpu_ranking_holders 2\n" in metrics
    assert "sparkguard_gpu_ranking_raised_total 2\n" in metrics


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
