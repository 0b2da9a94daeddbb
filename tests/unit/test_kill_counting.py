"""A victim is counted once, when it is gone, and for its job: the recorder and the collector as files.

The guards' hooks (earlyoom's -N hook, nohang's action script) hand every kill to
``guard-record`` (roles/earlyoom/files/guard-record.sh), which waits until the victim
has exited and names its job from the GPU ranking agent's jobs file; the root
collector (roles/earlyoom/files/collect.sh) then logs and counts it, once per
victim and once per job. Real shells, real processes, real signals; the spool,
the jobs file and the counters are in tmp_path.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sparkguard.templating import render_template
from tests.conftest import REPO

RECORDER = REPO / "roles" / "earlyoom" / "files" / "guard-record.sh"


def start_of(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


def events(spool: Path, wait_for: int = 0, timeout: float = 5) -> list[dict[str, str]]:
    deadline = time.time() + timeout
    while len(list(spool.glob("*.event"))) < wait_for and time.time() < deadline:
        time.sleep(0.05)
    return [dict(line.split("=", 1) for line in p.read_text().splitlines()) for p in sorted(spool.glob("*.event"))]


@pytest.fixture
def spool(tmp_path):
    path = tmp_path / "spool"
    path.mkdir()
    (tmp_path / "gpu-jobs").write_text("")
    return path


def record(spool: Path, pid: int, name: str = "python3", signal_name: str = "SIGTERM") -> subprocess.Popen:
    return subprocess.Popen([str(RECORDER), str(spool), str(spool.parent / "gpu-jobs"), str(pid), name, "0",
                             signal_name])


def test_a_victim_that_ignores_sigterm_is_recorded_only_once_it_is_gone(spool):
    """earlyoom 1.7 runs its hook whatever the kill returned: a container's PID 1 ignores SIGTERM."""
    victim = subprocess.Popen(["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"])
    try:
        time.sleep(0.2)
        start = start_of(victim.pid)
        victim.send_signal(signal.SIGTERM)
        recorder = record(spool, victim.pid)
        time.sleep(1.0)
        assert victim.poll() is None and events(spool) == []     # still alive: nothing recorded yet
        victim.kill()
        victim.wait(timeout=5)
        [event] = events(spool, wait_for=1)
        assert recorder.wait(timeout=5) == 0
        assert event["pid"] == str(victim.pid) and event["start"] == start and event["gone"] == "yes"
    finally:
        victim.kill()


def test_a_victim_already_gone_is_recorded_at_once_without_a_start_time(spool):
    victim = subprocess.Popen(["true"])
    victim.wait()
    record(spool, victim.pid).wait(timeout=5)
    [event] = events(spool, wait_for=1)
    assert event["pid"] == str(victim.pid) and event["start"] == "" and event["gone"] == "yes"


def test_the_job_comes_from_the_agents_jobs_file(spool):
    worker = subprocess.Popen(["sleep", "60"])
    try:
        start = start_of(worker.pid)
        (spool.parent / "gpu-jobs").write_text(
            f"4242 77 4242:77 sparkguard-job-lora.service python3\n{worker.pid} {start} 4242:77 "
            f"sparkguard-job-lora.service python3\n{worker.pid} 1 9:9 - other\n")
        recorder = record(spool, worker.pid, "pt_data_worker")
        worker.terminate()
        worker.wait(timeout=5)
        recorder.wait(timeout=5)
        [event] = events(spool, wait_for=1)
        assert (event["job"], event["unit"], event["jobname"], event["name"]) == (
            "4242:77", "sparkguard-job-lora.service", "python3", "pt_data_worker")
    finally:
        worker.kill()


def test_the_earlyoom_hook_hands_the_kill_to_the_recorder(spool, tmp_path):
    hook = tmp_path / "earlyoom-notify"
    hook.write_text(render_template("earlyoom/notify.sh.j2", recorder=str(RECORDER), spool_dir=str(spool),
                                    jobs_file=str(tmp_path / "gpu-jobs"), collector="/x"))
    hook.chmod(0o755)
    subprocess.run([str(hook)], env={**os.environ, "EARLYOOM_PID": "999999", "EARLYOOM_NAME": "python3",
                                     "EARLYOOM_UID": "1000"}, check=True, capture_output=True, timeout=10)
    [event] = events(spool, wait_for=1)
    assert (event["pid"], event["name"], event["uid"], event["signal"]) == ("999999", "python3", "1000", "SIGTERM")


COLLECTOR = REPO / "roles" / "earlyoom" / "files" / "collect.sh"


def collector(tmp_path: Path, spool: Path, guard: str = "earlyoom") -> list[str]:
    """The shipped collector's command line, as sparkguard-earlyoom-kills.service gives it (paths in tmp_path)."""
    marks = tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    return [str(COLLECTOR), guard, str(spool), str(tmp_path / "counts"), str(tmp_path / "guard.prom"), str(marks)]


def kills(tmp_path: Path) -> dict[str, int]:
    found = {}
    for line in (tmp_path / "guard.prom").read_text().splitlines():
        if line.startswith("sparkguard_earlyoom_kills_total{"):
            found[line.split('"')[1]] = int(line.split()[-1])
        if line.startswith("sparkguard_earlyoom_kills_all_total "):
            found["ALL"] = int(line.split()[-1])
    return found


def event(pid: int, start: str = "", job: str = "", name: str = "python3", jobname: str = "") -> str:
    return f"pid={pid}\nstart={start}\nuid=0\nname={name}\nsignal=SIGTERM\ngone=yes\njob={job}\nunit=\njobname={jobname}\n"


# Each row: the events of one collector run after another (one list per run) -> counts by label.
CASES = {
    "one victim": ([[event(10, "5")]], {"python3": 1, "ALL": 1}),
    "the same victim twice (a SIGTERM round repeated)": ([[event(10, "5")], [event(10, "5")]], {"python3": 1, "ALL": 1}),
    "start known, then unknown (an escalation after it left)": ([[event(10, "5")], [event(10)]], {"python3": 1, "ALL": 1}),
    "a reused PID with another start time": ([[event(10, "5")], [event(10, "6")]], {"python3": 2, "ALL": 2}),
    "two processes of one job (the rank, then its worker)": (
        [[event(10, "5", "10:5")], [event(11, "6", "10:5", name="pt_data_worker", jobname="python3")]],
        {"python3": 1, "ALL": 1}),
    "a worker killed first counts under its job's name": (
        [[event(11, "6", "10:5", name="pt_data_worker", jobname="python3")]], {"python3": 1, "ALL": 1}),
    "two jobs": ([[event(10, "5", "10:5")], [event(20, "7", "20:7")]], {"python3": 2, "ALL": 2}),
    "two events in one run": ([[event(10, "5", "10:5"), event(12, "8", "10:5")]], {"python3": 1, "ALL": 1}),
}


@pytest.mark.parametrize("runs,expected", CASES.values(), ids=list(CASES))
def test_collector_counts_each_victim_and_each_job_once(tmp_path, spool, runs, expected):
    script = collector(tmp_path, spool)
    for number, batch in enumerate(runs):
        for index, text in enumerate(batch):
            (spool / f"{number}.{index}.event").write_text(text)
        run = subprocess.run(script, capture_output=True, text=True, timeout=20)
        assert run.returncode == 0, run.stderr
        assert list(spool.iterdir()) == []
    assert kills(tmp_path) == expected


def test_a_kill_ten_minutes_later_counts_again(tmp_path, spool):
    script = collector(tmp_path, spool)
    (tmp_path / "counts.recent").write_text(f"{int(time.time()) - 700} 10 5 10:5\n")
    (spool / "1.1.event").write_text(event(10, "5", "10:5"))
    subprocess.run(script, check=True, capture_output=True, timeout=20)
    assert kills(tmp_path) == {"python3": 1, "ALL": 1}
    assert (tmp_path / "counts.recent").read_text().count("\n") == 1     # the old line was dropped


# A *.tmp in the 1733 spool is a write in progress only when it is a young regular file of root or of a
# systemd dynamic user (UIDs 61184-65519, earlyoom's DynamicUser): anything else is removed (issue 27).
TMP_OWNERS = {
    "root": (0, True),
    "the first dynamic uid (61184)": (61184, True),
    "a dynamic user (61200)": (61200, True),
    "the last dynamic uid (65519)": (65519, True),
    "a local user (1000)": (1000, False),
    "just below the dynamic range (61183)": (61183, False),
    "just above the dynamic range (65520)": (65520, False),
    "a high uid (70000)": (70000, False),
}


@pytest.mark.parametrize("uid,left", TMP_OWNERS.values(), ids=list(TMP_OWNERS))
def test_only_the_guards_young_tmp_file_is_left_in_the_spool(tmp_path, spool, uid, left):
    script = collector(tmp_path, spool)
    young, old = spool / "1.1.event.tmp", spool / "2.2.event.tmp"
    for path in (young, old):
        path.write_text(event(10, "5"))
        os.chown(path, uid, uid)
    os.utime(old, (time.time() - 300, time.time() - 300))              # a write that never finished
    (spool / "3.3.tmp").symlink_to("/etc/shadow")                         # a link is never a write in progress
    forged = spool / "4.4.event"
    forged.write_text(event(20, "7", name="sshd"))
    os.chown(forged, uid, uid)
    run = subprocess.run(script, capture_output=True, text=True, timeout=20)
    assert run.returncode == 0, run.stderr
    assert sorted(p.name for p in spool.iterdir()) == (["1.1.event.tmp"] if left else [])
    assert kills(tmp_path) == ({"sshd": 1, "ALL": 1} if left else {"ALL": 0})


def test_the_collector_refuses_what_its_unit_never_passes(tmp_path, spool):
    base = collector(tmp_path, spool)
    for argv in (base[:-1], [base[0], "sh", *base[2:]], [*base, "extra"]):
        run = subprocess.run(argv, capture_output=True, text=True, timeout=20)
        assert run.returncode == 2 and ("usage" in run.stderr or "unknown guard" in run.stderr), run
    assert not (tmp_path / "guard.prom").exists() and not (tmp_path / "counts").exists()


@pytest.mark.parametrize("guard", ["earlyoom", "nohang"])
def test_the_kills_unit_gives_the_collector_the_roles_paths(guard):
    """The program is shipped as it is; its unit's ExecStart carries the values a template once inlined."""
    from sparkguard.engine.render import host_states
    from sparkguard.inventory.loader import load_inventory
    from sparkguard.roles.earlyoom.state import COLLECTOR as SHIPPED
    from sparkguard.roles.earlyoom.state import COUNTS_FILE, KILLS_SERVICE_UNIT, MARKS_DIR, SPOOL_DIR, TEXTFILE

    entry = load_inventory(REPO / "inventory" / "example").host("spark-01")
    entry = entry.__class__(**{**entry.__dict__, "config": entry.config.model_copy(
        update={"earlyoom": entry.config.earlyoom.model_copy(update={"guard": guard})})})
    state = next(s for s in host_states(entry) if s.role == "earlyoom")
    unit = next(f for f in state.files if f.path.endswith(KILLS_SERVICE_UNIT))
    [exec_start] = [line for line in unit.content.splitlines() if line.startswith("ExecStart=")]
    assert exec_start.split("=", 1)[1].split() == [SHIPPED, guard, SPOOL_DIR, COUNTS_FILE, TEXTFILE, MARKS_DIR]
    assert next(f for f in state.files if f.path == SHIPPED).content == COLLECTOR.read_text()
