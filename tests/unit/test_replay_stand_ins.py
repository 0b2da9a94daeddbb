"""The replays' stand-in nvidia-smi (tests/replay.py FAKE_NVIDIA_SMI) against a fake /proc.

STAND-IN: it reports each process's hugetlb memory (the replays' "driver memory") in the format of
`nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits`. The GPU ranking agent
parses that format, so a stand-in that drifts from it would blind the agent in every replay.
"""

from __future__ import annotations

import os
import subprocess

from tests.replay import FAKE_NVIDIA_SMI

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
