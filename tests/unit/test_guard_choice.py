"""Which guard a node gets, and what each guard's desired state is (tables: facts in, state out)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from sparkguard.engine.render import host_states
from sparkguard.facts import parse_probe
from sparkguard.inventory.loader import load_inventory
from sparkguard.roles.earlyoom import guard as guard_module
from sparkguard.roles.earlyoom.checks import preflight
from sparkguard.roles.earlyoom.guard import choose_guard, describe
from sparkguard.roles.earlyoom.names import avoid_regex, prefer_regex
from sparkguard.roles.earlyoom.settings import EarlyoomSettings
from sparkguard.roles.earlyoom.state import JOBS_FILE, MARKS_DIR, NOHANG_ACTION, NOHANG_CONF, SPOOL_DIR
from sparkguard.roles.earlyoom.state import RECORDER as RECORDER_PATH
from tests.conftest import REPO

BOOKWORM = {"earlyoom_version": "earlyoom v1.7", "nohang_candidate": "0.2.0-2"}
NOBLE = {"earlyoom_version": "", "earlyoom_candidate": "1.7-2build1", "nohang_candidate": "0.2.0-1"}
TRIXIE = {"earlyoom_version": "", "earlyoom_candidate": "1.8.2-1", "nohang_candidate": "0.2.0-3"}
TRIXIE_WITH_1_8 = {"earlyoom_version": "earlyoom v1.8.2", "nohang_candidate": "0.2.0-3"}
RESOLUTE = {"earlyoom_version": "", "earlyoom_candidate": "1:1.9.0-1ubuntu1", "nohang_candidate": "0.2.0-3"}
NO_EARLYOOM = {"earlyoom_version": "", "earlyoom_candidate": "(none)", "nohang_candidate": "0.2.0-3"}
NO_NOHANG = {"earlyoom_version": "", "earlyoom_candidate": "1.8.2-1", "nohang_candidate": "(none)"}


def live(raw: dict):
    return parse_probe("memtotal_kb=24683584\n" + "".join(f"{k}={v}\n" for k, v in raw.items()))


@pytest.mark.parametrize("declared, newer, raw, expected", [
    ("auto", "refuse", None, "earlyoom"),                     # render: offline, says what it assumed
    ("auto", "refuse", BOOKWORM, "earlyoom"),
    ("auto", "refuse", NOBLE, "earlyoom"),                    # Ubuntu 24.04 / DGX OS 7: 1.7, not yet installed
    ("auto", "refuse", TRIXIE, "nohang"),
    ("auto", "refuse", TRIXIE_WITH_1_8, "nohang"),            # switches a node where 1.8 was accepted before
    ("auto", "refuse", RESOLUTE, "nohang"),                   # epoch + Ubuntu suffix
    ("auto", "refuse", NO_EARLYOOM, "nohang"),
    ("auto", "accept-anon-relative", TRIXIE, "earlyoom"),     # 1.8 knowingly
    ("earlyoom", "refuse", TRIXIE, "earlyoom"),               # (refused by preflight, below)
    ("nohang", "refuse", BOOKWORM, "nohang"),
    ("nohang", "refuse", None, "nohang"),                     # declared: render is exact
])
def test_guard_choice_table(declared, newer, raw, expected):
    settings = EarlyoomSettings(guard=declared, newer_version=newer)
    choice = choose_guard(settings, live(raw) if raw is not None else None)
    assert choice.guard == expected, choice
    assert choice.unit == f"{expected}.service"
    assert choice.unit not in choice.others and len(choice.others) == 2


def _problems(inventory_dir, raw, guard="auto", newer="refuse"):
    path = inventory_dir(f"""\
        all:
          hosts:
            h: {{ssh_host: 192.0.2.1, earlyoom: {{guard: {guard}, newer_version: {newer}}}}}
        """)
    return list(preflight(load_inventory(path).host("h").config, live(raw)))


@pytest.mark.parametrize("raw, guard, newer, field", [
    (BOOKWORM, "auto", "refuse", None),
    (TRIXIE, "auto", "refuse", None),                         # nohang: no refusal any more
    (TRIXIE, "earlyoom", "refuse", "earlyoom.guard"),         # declared earlyoom on 1.8: refused, ways out named
    (TRIXIE, "earlyoom", "accept-anon-relative", None),
    (NO_NOHANG, "auto", "refuse", "earlyoom.guard"),          # nohang needed but apt has none: refused
    (NO_NOHANG, "nohang", "refuse", "earlyoom.guard"),
    ({"earlyoom_version": "earlyoom (devel)", "nohang_candidate": "0.2.0-3"}, "auto", "refuse", "earlyoom"),
    ({"earlyoom_version": "earlyoom (devel)", "nohang_candidate": "0.2.0-3"}, "nohang", "refuse", None),
])
def test_preflight_table(inventory_dir, raw, guard, newer, field):
    problems = _problems(inventory_dir, raw, guard, newer)
    assert [p.field for p in problems] == ([field] if field else []), problems
    if field == "earlyoom.guard" and guard == "earlyoom":
        assert "1.8.2" in problems[0].allowed and "nohang" in problems[0].allowed


def _states(inventory_dir, raw, extra=""):
    path = inventory_dir(f"""\
        all:
          vars:
            node: {{memory_total_gib: 121.7}}
            earlyoom: {{{extra}}}
          hosts:
            h: {{ssh_host: 192.0.2.1}}
        """)
    entry = load_inventory(path).host("h")
    return {s.role: s for s in host_states(entry, live=live(raw) if raw else None)}["earlyoom"]


def test_nohang_state_is_driven_by_the_same_settings(inventory_dir):
    state = _states(inventory_dir, TRIXIE, "term_percent: 9, kill_percent: 4.5, prefer_extra: [my_trainer]")
    assert state.packages == ("nohang", "python3")
    conf = state.file(NOHANG_CONF)
    assert conf.validate == "nohang --check --config {path}"
    settings = dict(line.split(" = ", 1) for line in conf.content.splitlines()
                    if " = " in line and not line.startswith(("#", "@")))
    assert settings["soft_threshold_min_mem"] == "9 %" and settings["hard_threshold_min_mem"] == "4.5 %"
    assert settings["soft_threshold_min_swap"] == settings["hard_threshold_min_swap"] == "100 %"  # swap never delays
    assert settings["ignore_positive_oom_score_adj"] == "False"   # the bands stay in the score
    assert settings["psi_checking_enabled"] == "False" and settings["max_sleep"] == "1"
    prefer = prefer_regex(("my_trainer",))
    assert f"@BADNESS_ADJ_RE_NAME 300 /// {prefer}" in conf.content
    assert f"@BADNESS_ADJ_RE_NAME -300 /// {avoid_regex()}" in conf.content
    action = f"{NOHANG_ACTION} group {RECORDER_PATH} {SPOOL_DIR} {JOBS_FILE} {MARKS_DIR}"
    assert f"@SOFT_ACTION_RE_NAME . /// {action} term $PID" in conf.content
    assert settings["post_kill_exe"] == f"{action} killed $PID $NAME"
    # nohang matches with Python's re.search: the same anchored names as earlyoom's ERE.
    assert re.search(prefer, "my_trainer") and re.search(prefer, "pt_elastic") and not re.search(prefer, "python3")
    assert re.search(avoid_regex(), "sshd-session") and re.search(avoid_regex(), "nohang")
    services = {s.name: s for s in state.services}
    assert services["nohang.service"].restart_on == (NOHANG_CONF, "/etc/systemd/system/nohang.service.d/50-sparkguard.conf",
                                                     NOHANG_ACTION)
    assert services["nohang-desktop.service"].masked is True and "earlyoom.service" not in services
    only, oomd = state.ensures
    assert "earlyoom.service" in only.check and "nohang.service" not in only.check
    assert "systemd-oomd.service" in oomd.check and "mask" in oomd.fix


def test_earlyoom_state_stops_nohang_and_ships_no_nohang_file(inventory_dir):
    for raw in (None, BOOKWORM):
        state = _states(inventory_dir, raw)
        assert state.packages == ("earlyoom", "python3")
        assert not [f for f in state.files if "nohang" in f.path]
        assert "-m 8,4 -s 100,100" in state.file("/etc/default/earlyoom").content
        only, oomd = state.ensures
        assert "nohang.service nohang-desktop.service" in only.check and "earlyoom.service" not in only.check
        assert oomd.description.startswith("systemd-oomd is not a second guard")
    kept = _states(inventory_dir, BOOKWORM, "systemd_oomd: keep")
    assert [e.description for e in kept.ensures] == ["earlyoom is the only low-memory guard"]


def test_render_of_an_auto_host_is_the_earlyoom_variant_and_a_declared_nohang_host_renders_exactly(inventory_dir):
    assert _states(inventory_dir, None).packages[0] == "earlyoom"
    declared = _states(inventory_dir, None, "guard: nohang")
    assert declared == _states(inventory_dir, TRIXIE, "guard: nohang")


def test_describe_names_guard_version_and_reason(inventory_dir):
    path = inventory_dir("all:\n  hosts:\n    h: {ssh_host: 192.0.2.1}\n")
    config = load_inventory(path).host("h").config
    assert describe(config, live(TRIXIE))["guard"] == "nohang 0.2.0"
    assert describe(config, live(BOOKWORM))["guard"] == "earlyoom 1.7"
    assert "1.8.2" in describe(config, live(TRIXIE))["guard_reason"]


def test_audit_probes_both_variants_of_an_auto_host(inventory_dir):
    from sparkguard.audit.probe import build_probe, probe_states

    path = inventory_dir("all:\n  vars:\n    node: {memory_total_gib: 121.7}\n  hosts:\n    h: {ssh_host: 192.0.2.1}\n")
    entry = load_inventory(path).host("h")
    script = build_probe(entry, probe_states(entry))
    assert "/etc/default/earlyoom" in script and NOHANG_CONF in script
    declared = inventory_dir("all:\n  vars:\n    node: {memory_total_gib: 121.7}\n    earlyoom: {guard: earlyoom}\n"
                             "  hosts:\n    h: {ssh_host: 192.0.2.1}\n")
    assert NOHANG_CONF not in build_probe(load_inventory(declared).host("h"),
                                          probe_states(load_inventory(declared).host("h")))
    assert guard_module.live_alternatives(load_inventory(declared).host("h").config) == ()


RECORDER = REPO / "roles" / "earlyoom" / "files" / "guard-record.sh"


def _action_script(tmp_path: Path, group: bool, jobs: str = "") -> tuple[list[str], Path]:
    """nohang's action program as shipped, with the role's arguments pointing into tmp_path (real shell, real
    signals); nohang appends its own words (``term PID``, ``killed PID NAME``)."""
    spool, marks = tmp_path / "spool", tmp_path / "marks"
    spool.mkdir()
    marks.mkdir()
    (tmp_path / "gpu-jobs").write_text(jobs)
    return [str(REPO / "roles" / "earlyoom" / "files" / "nohang-action.sh"), "group" if group else "process", str(RECORDER),
            str(spool), str(tmp_path / "gpu-jobs"), str(marks)], spool


@pytest.fixture
def action(tmp_path):
    return _action_script(tmp_path, group=False)


def _events(spool: Path, wait_for: int = 0) -> list[dict]:
    """The events in the spool; with ``wait_for``, first wait (5 s at most) until there are that many:
    the recorder writes each one only once its victim is gone."""
    deadline = time.time() + 5
    while len(list(spool.glob("*.event"))) < wait_for and time.time() < deadline:
        time.sleep(0.05)
    return [dict(line.split("=", 1) for line in p.read_text().splitlines()) for p in sorted(spool.glob("*.event"))]


def test_action_terms_records_and_an_escalation_is_not_counted_twice(action):
    script, spool = action
    victim = subprocess.Popen(["sleep", "60"])
    time.sleep(0.1)
    assert subprocess.run([*script, "term", str(victim.pid)]).returncode == 0
    assert victim.wait(timeout=5) == -signal.SIGTERM
    [event] = _events(spool, wait_for=1)
    time.sleep(0.3)
    assert list(spool.iterdir()) == list(spool.glob("*.event"))   # only events: the spool's path unit re-fires otherwise
    assert {k: event[k] for k in ("pid", "uid", "name", "signal", "gone", "job")} == {
        "pid": str(victim.pid), "uid": str(os.getuid()), "name": "sleep", "signal": "SIGTERM", "gone": "yes", "job": ""}
    # nohang's SIGKILL of the same victim afterwards: logged, not a second victim.
    run = subprocess.run([*script, "killed", str(victim.pid), "sleep"], capture_output=True, text=True)
    assert run.returncode == 0 and "escalated" in run.stderr and len(_events(spool)) == 1
    # A SIGKILL with no SIGTERM before it (memory fell straight below the kill line) is counted.
    subprocess.run([*script, "killed", "999999", "jaxtrain"], check=True, capture_output=True)
    assert [e["signal"] for e in _events(spool, wait_for=2)].count("SIGKILL") == 1


@pytest.mark.parametrize("args", [["term"], ["term", "$(touch /tmp/x)"], ["bogus", "1"]])
def test_action_refuses_what_nohang_should_never_send(action, args):
    script, spool = action
    assert subprocess.run([*script, *args], capture_output=True).returncode == 2
    assert _events(spool) == []


def test_action_refuses_a_scope_its_config_never_gives(action):
    script, spool = action
    victim = subprocess.Popen(["sleep", "60"])
    try:
        run = subprocess.run([script[0], "everything", *script[2:], "term", str(victim.pid)], capture_output=True)
        assert run.returncode == 2 and victim.poll() is None and _events(spool) == []
    finally:
        victim.kill()


def test_action_with_kill_process_group_terms_the_whole_group(tmp_path):
    script, spool = _action_script(tmp_path, group=True)
    leader = subprocess.Popen(["sh", "-c", "sleep 60 & echo $!; wait"], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    worker = int(leader.stdout.readline())
    assert subprocess.run([*script, "term", str(leader.pid)]).returncode == 0
    leader.wait(timeout=5)
    deadline = time.time() + 5
    while Path(f"/proc/{worker}").exists() and time.time() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{worker}").exists() or "Z" in Path(f"/proc/{worker}/stat").read_text().split()[2]
    assert [e["signal"] for e in _events(spool, wait_for=1)] == ["SIGTERM"]


# A victim whose memory comes back only after it is signalled: on SIGTERM it takes 0.6 s to go (a GPU driver
# releasing a job's memory; nohang, seeing RSS 0 and not running, takes it for dead meanwhile).
SLOW_TO_GO = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: (time.sleep(0.6), sys.exit(0))); "
              "time.sleep(60)")


def _term(script: list[str], pid: int) -> subprocess.CompletedProcess:
    return subprocess.run([*script, "term", str(pid)], capture_output=True, text=True, timeout=30)


def _started(*argv: str) -> subprocess.Popen:
    proc = subprocess.Popen(list(argv))
    time.sleep(0.2)
    return proc


def test_no_second_victim_while_the_first_ones_memory_is_still_coming_back(action):
    script, spool = action
    trainer = _started("python3", "-c", SLOW_TO_GO)
    serving, notebook = _started("sleep", "60"), _started("sleep", "60")
    try:
        signalled_at = time.monotonic()
        assert _term(script, trainer.pid).returncode == 0
        # nohang asks for the next victim at once: that action waits while the trainer is still there; one
        # asking meanwhile signals nobody and returns at once.
        waiting = subprocess.Popen([*script, "term", str(serving.pid)], stderr=subprocess.PIPE, text=True)
        time.sleep(0.2)
        started = time.monotonic()
        meanwhile = _term(script, notebook.pid)
        assert meanwhile.returncode == 0 and time.monotonic() - started < 0.5, meanwhile.stderr
        assert "not signalled" in meanwhile.stderr and notebook.poll() is None
        _, err = waiting.communicate(timeout=10)
        assert waiting.returncode == 0 and "not signalled" in err and f"pid {trainer.pid}," in err, err
        assert trainer.wait(timeout=5) == 0 and time.monotonic() - signalled_at >= 0.6
        assert serving.poll() is None and notebook.poll() is None
        assert [e["pid"] for e in _events(spool, wait_for=1)] == [str(trainer.pid)]
        # Memory still low a second after the trainer's signal: nohang asks again and the next one goes.
        time.sleep(max(0.0, 1.1 - (time.monotonic() - signalled_at)))
        assert _term(script, serving.pid).returncode == 0
        assert serving.wait(timeout=5) == -signal.SIGTERM
    finally:
        for proc in (trainer, serving, notebook):
            proc.kill()
            proc.wait()


def test_the_next_victim_waits_a_second_after_one_that_went_at_once(action):
    """The race the nohang replay lost: the trainer went within 22 ms, its memory was not back yet, and nohang
    signalled the vLLM stand-in. Within a second of a signal, nobody else is signalled."""
    script, spool = action
    trainer, serving = _started("sleep", "60"), _started("sleep", "60")
    try:
        signalled_at = time.monotonic()
        assert _term(script, trainer.pid).returncode == 0 and trainer.wait(timeout=5) == -signal.SIGTERM
        refused = _term(script, serving.pid)
        assert time.monotonic() - signalled_at < 1.0, "too slow to show the second's rule"
        assert f"memory of pid {trainer.pid}, signalled" in refused.stderr and serving.poll() is None
        time.sleep(max(0.0, 1.1 - (time.monotonic() - signalled_at)))
        assert _term(script, serving.pid).returncode == 0 and serving.wait(timeout=5) == -signal.SIGTERM
        assert sorted(e["pid"] for e in _events(spool, wait_for=2)) == sorted([str(trainer.pid), str(serving.pid)])
    finally:
        for proc in (trainer, serving):
            proc.kill()
            proc.wait()

def test_a_victim_that_outlives_the_wait_does_not_hold_the_next_one_back(action):
    script, _ = action
    stuck = _started("python3", "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                      "time.sleep(60)")
    serving = _started("sleep", "60")
    try:
        assert _term(script, stuck.pid).returncode == 0
        started = time.monotonic()
        assert _term(script, serving.pid).returncode == 0
        assert 4.5 <= time.monotonic() - started < 10
        assert serving.wait(timeout=5) == -signal.SIGTERM and stuck.poll() is None
    finally:
        for proc in (stuck, serving):
            proc.kill()
            proc.wait()


def test_the_rest_of_the_same_job_is_signalled_at_once(tmp_path):
    trainer = _started("python3", "-c", SLOW_TO_GO)
    worker = _started("sleep", "60")
    script, _ = _action_script(tmp_path, group=False, jobs=f"{trainer.pid} 1 lora sg-train python3\n"
                                                         f"{worker.pid} 2 lora sg-train pt_data_worker\n")
    try:
        assert _term(script, trainer.pid).returncode == 0
        started = time.monotonic()
        assert _term(script, worker.pid).returncode == 0 and time.monotonic() - started < 0.5
        assert worker.wait(timeout=5) == -signal.SIGTERM
    finally:
        for proc in (trainer, worker):
            proc.kill()
            proc.wait()

def test_collector_counts_only_the_guards_events_and_never_blocks(tmp_path):
    """A local user can create files in the 1733 spool: a FIFO, a link or a forged event must not count or hang."""
    spool, marks = tmp_path / "spool", tmp_path / "marks"
    spool.mkdir()
    marks.mkdir()
    counts, textfile = tmp_path / "counts", tmp_path / "guard.prom"
    script = [str(REPO / "roles" / "earlyoom" / "files" / "collect.sh"), "nohang", str(spool), str(counts), str(textfile),
              str(marks)]
    (spool / "1.1.event").write_text("pid=42\nuid=0\nname=python3\nsignal=SIGTERM\n")     # root: the guard
    dynamic = spool / "2.2.event"
    dynamic.write_text("pid=43\nuid=0\nname=llama-server\n")
    os.chown(dynamic, 61200, 61200)                                                      # earlyoom's DynamicUser
    forged = spool / "3.3.event"
    forged.write_text("pid=1\nuid=0\nname=sshd\n")
    os.chown(forged, 1000, 1000)                                                         # a local user
    os.mkfifo(spool / "4.4.event")                                                       # would block a reader
    (spool / "5.5.event").symlink_to("/etc/shadow")
    (spool / "junk").write_text("x")
    run = subprocess.run(script, capture_output=True, text=True, timeout=20)
    assert run.returncode == 0, run.stderr
    prom = textfile.read_text()
    assert "sparkguard_earlyoom_kills_all_total 2" in prom, prom
    assert 'victim="python3"} 1' in prom and 'victim="llama-server"} 1' in prom and "sshd" not in prom
    assert 'sparkguard_guard_info{guard="nohang"} 1' in prom
    assert list(spool.iterdir()) == []          # nothing left: the path unit would re-fire on a non-empty spool
