"""sparkguard-train's pure parts, from the script as rendered for inventory/example.

`docker run` is parsed so the launcher can own the container (--init, --name,
--oom-score-adj) without misreading the image; what it cannot own it refuses
before anything starts. The preflight counts what training mode frees by the
node's budget. Both run here on the rendered script; the sandbox tests run it
on nodes.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json

import pytest

from sparkguard.engine.render import host_states
from sparkguard.inventory.loader import load_inventory
from sparkguard.roles.base.interface import TRAINING_TARGET
from sparkguard.roles.swap.interface import TRAINING_JOB_PREFIX
from sparkguard.roles.swap.state import TRAIN_CONFIG
from tests.conftest import REPO


@pytest.fixture(scope="module")
def launcher(tmp_path_factory):
    states = host_states(load_inventory(REPO / "inventory" / "example").host("spark-01"))
    files = {f.path: f.content for state in states for f in state.files}
    path = tmp_path_factory.mktemp("launcher") / "sparkguard_train.py"
    path.write_text(files["/usr/local/bin/sparkguard-train"])
    spec = importlib.util.spec_from_file_location("sparkguard_train", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.layout = module.Layout.from_config(json.loads(files[TRAIN_CONFIG]))  # as main() reads it on the node
    return module


def test_the_shipped_launcher_is_the_source_file_and_reads_the_roles_config(launcher):
    from sparkguard.roles.swap.files import train_launcher

    assert str(train_launcher.CONFIG) == TRAIN_CONFIG == str(launcher.CONFIG)
    assert (launcher.layout.target, launcher.layout.job_prefix) == (TRAINING_TARGET, TRAINING_JOB_PREFIX)
    term = load_inventory(REPO / "inventory" / "example").host("spark-01").config.earlyoom.term_percent
    assert launcher.layout.earlyoom_default_term == term


CONTAINER = "sparkguard-job-train-20261203-101010"
OWNED = ["--init", f"--name={CONTAINER}", "--oom-score-adj=1000"]


@pytest.mark.parametrize("args,options,rest", [
    (["img", "python3", "t.py"], [], ["img", "python3", "t.py"]),
    (["--rm", "--gpus", "all", "-it", "nvcr.io/nvidia/pytorch:25.11-py3", "python", "t.py", "--lr", "1"],
     ["--rm", "--gpus", "all", "-it"], ["nvcr.io/nvidia/pytorch:25.11-py3", "python", "t.py", "--lr", "1"]),
    (["-e", "HF_TOKEN", "-v", "/data:/data", "--memory=64g", "--shm-size", "16g", "img"],
     ["-e", "HF_TOKEN", "-v", "/data:/data", "--memory=64g", "--shm-size", "16g"], ["img"]),
    (["-eHF_HOME=/x", "-w", "/work", "--ipc=host", "img", "-c", "x"],
     ["-eHF_HOME=/x", "-w", "/work", "--ipc=host"], ["img", "-c", "x"]),
    (["--restart=no", "--restart", "no", "img"], ["--restart=no", "--restart", "no"], ["img"]),
    (["--rm", "--", "img", "--rm"], ["--rm"], ["img", "--rm"]),
])
def test_docker_run_is_parsed_and_owned(launcher, args, options, rest):
    assert launcher.docker_options(args) == (options, rest)
    command = launcher.job_command(["docker", "run", *args], True, CONTAINER)
    kept = [option for option in options if option != "--rm"]     # the job removes the container itself
    assert command == ["docker", "run", *OWNED, *kept, *rest]


@pytest.mark.parametrize("args,words", [
    (["--name", "mine", "img"], "sparkguard names the container"),
    (["--name=mine", "img"], "sparkguard names the container"),
    (["--init", "img"], "PID 1"),
    (["--oom-score-adj=-500", "img"], "--oom-score-adj=1000"),
    (["--oom-score-adj", "0", "img"], "--oom-score-adj=1000"),
    (["-d", "img"], "outlive the job"),
    (["-itd", "img"], "outlive the job"),
    (["--detach", "img"], "outlive the job"),
    (["--restart=always", "img"], "restart policy"),
    (["--restart", "on-failure", "img"], "restart policy"),
    (["--frobnicate", "img"], "write it as --frobnicate=VALUE"),
    (["--rm"], "no image given"),
    (["-e"], "needs a value"),
])
def test_docker_run_sparkguard_cannot_own_is_refused(launcher, capsys, args, words):
    with pytest.raises(SystemExit) as stop:
        launcher.job_command(["docker", "run", *args], True, CONTAINER)
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "refused" in err and words in err and "Nothing was started" in err


def test_not_docker_run_is_refused(launcher, capsys):
    with pytest.raises(SystemExit):
        launcher.job_command(["podman", "run", "img"], True, CONTAINER)
    assert launcher.job_command(["python3", "t.py"], False, CONTAINER) == ["python3", "t.py"]


def test_preflight_counts_what_training_mode_frees(launcher, tmp_path, monkeypatch):
    budget = tmp_path / "budget.json"
    budget.write_text(json.dumps({"serving": [
        {"name": "big", "footprint_bytes": 40 * 2**30, "during_training_bytes": 22 * 2**30},
        {"name": "stopped", "footprint_bytes": 10 * 2**30, "during_training_bytes": 0},
        {"name": "shrunk-already", "footprint_bytes": 10 * 2**30, "during_training_bytes": 0},
        {"name": "bad"},
    ]}))
    modes = tmp_path / "modes"
    modes.mkdir()
    (modes / "shrunk-already.mode").write_text("SPARKGUARD_VLLM_MODE=shared\n")
    active = {"sparkguard-vllm@big.service", "sparkguard-vllm@shrunk-already.service"}
    layout = dataclasses.replace(launcher.layout, budget_json=budget, vllm_mode_dir=modes)
    monkeypatch.setattr(launcher, "systemctl", lambda *a: type("R", (), {
        "stdout": "active\n" if a[-1] in active else "inactive\n"})())
    freed, notes = launcher.training_mode_frees(layout)
    assert freed == 18 * 2**30 and notes == ["big 18.0 GiB"]


@pytest.mark.parametrize("content", ["", "not json", "[]", '{"serving": "x"}', '{"serving": [1, null]}'])
def test_preflight_without_a_readable_budget_counts_nothing(launcher, tmp_path, monkeypatch, content):
    budget = tmp_path / "budget.json"
    budget.write_text(content)
    assert launcher.training_mode_frees(dataclasses.replace(launcher.layout, budget_json=budget)) == (0, [])


class FakeSystemctl:
    """systemctl as the reaper sees it: the target's state and `list-units` of the job units in each state."""

    def __init__(self, target: str, jobs: dict[str, str]):
        self.target, self.jobs, self.calls = target, jobs, []

    def __call__(self, *args):
        self.calls.append(args)
        if args[0] == "is-active":
            out = self.target + "\n"
        elif args[0] == "list-units":
            states = next(a for a in args if a.startswith("--state=")).removeprefix("--state=").split(",")
            # The description column can hold anything the job's command line held.
            out = "".join(f"{name} loaded {state} running sparkguard training job: sparkguard-job-x\n"
                          for name, state in self.jobs.items() if state in states)
        else:
            out = ""
        return type("R", (), {"stdout": out, "returncode": 0})()


@pytest.mark.parametrize("target,jobs,leaves", [
    ("active", {}, True),                                                   # launcher died before its job
    ("active", {f"{TRAINING_JOB_PREFIX}a-1.service": "active"}, False),
    ("active", {f"{TRAINING_JOB_PREFIX}a-1.service": "activating"}, False),
    ("active", {f"{TRAINING_JOB_PREFIX}a-1.service": "deactivating"}, False),   # its own end leaves
    ("activating", {}, False),                                              # swapoff still running
    ("inactive", {}, False),
])
def test_the_reaper_leaves_training_mode_only_when_no_job_holds_it(launcher, monkeypatch, capsys,
                                                                   target, jobs, leaves):
    fake = FakeSystemctl(target, jobs)
    monkeypatch.setattr(launcher, "systemctl", fake)
    assert launcher.leave_if_idle(launcher.layout) == 0
    assert (("stop", "--no-block", TRAINING_TARGET) in fake.calls) == leaves
    assert ("no training job holds" in capsys.readouterr().err) == leaves


def test_a_finishing_job_leaves_training_mode_only_if_it_was_the_last(launcher, monkeypatch):
    me, other = f"{TRAINING_JOB_PREFIX}me-1.service", f"{TRAINING_JOB_PREFIX}other-1.service"
    for jobs, leaves in (({me: "deactivating"}, True), ({me: "deactivating", other: "active"}, False)):
        fake = FakeSystemctl("active", jobs)
        monkeypatch.setattr(launcher, "systemctl", fake)
        assert launcher.running_jobs(launcher.layout, ("active", "activating", "reloading"), besides=me) == \
            ([] if leaves else [other])


def test_the_reaper_runs_only_while_training_mode_is_on():
    """Its timer is wanted by the target and bound to it, so it never runs outside training mode."""
    from sparkguard.layout import dropin_path, unit_path
    from sparkguard.roles.swap.state import LAUNCHER, REAPER_SERVICE, REAPER_TIMER

    states = host_states(load_inventory(REPO / "inventory" / "example").host("spark-01"))
    files = {f.path: f.content for state in states for f in state.files}
    dropin = files[dropin_path(TRAINING_TARGET, "50-sparkguard-swap.conf")]
    timer, service = files[unit_path(REAPER_TIMER)], files[unit_path(REAPER_SERVICE)]
    assert f"Wants={REAPER_TIMER}" in dropin.splitlines()
    assert {f"BindsTo={TRAINING_TARGET}", f"After={TRAINING_TARGET}"} <= set(timer.splitlines())
    assert "[Install]" not in timer
    assert f"ExecStart={LAUNCHER} --leave-if-idle" in service.splitlines()
