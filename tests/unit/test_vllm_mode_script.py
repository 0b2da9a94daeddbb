"""Role vllm's mode script (roles/vllm/files/mode.sh), run as it is shipped, with its unit's arguments.

STAND-IN: ``systemctl`` is a script on PATH that records its arguments (and answers ``is-enabled``); the
real restarts and stops are the sandbox's (tests/sandbox/test_vllm.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sparkguard.roles.vllm.state import MODE_SCRIPT_SOURCE

FAKE_SYSTEMCTL = """#!/bin/sh
echo "$*" >> "$SYSTEMCTL_LOG"
[ "$1 $2" = "-q is-enabled" ] && exit "${ENABLED_RC:-0}"
exit 0
"""


@pytest.fixture
def run(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(FAKE_SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    log = tmp_path / "systemctl.log"
    # Not the role's own paths: a script that ignored its arguments would not pass.
    modes, configs = tmp_path / "run" / "vllm", "/srv/sg-vllm-configs"

    def run(*args: str, enabled: bool = True, mode_dir: str | None = None) -> tuple[subprocess.CompletedProcess, list[str]]:
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "SYSTEMCTL_LOG": str(log), "ENABLED_RC": "0" if enabled else "1"}
        done = subprocess.run(["sh", str(MODE_SCRIPT_SOURCE), mode_dir or str(modes), configs, *args],
                              capture_output=True, text=True, env=env, timeout=30)
        calls = log.read_text().splitlines() if log.exists() else []
        log.unlink(missing_ok=True)
        return done, calls

    run.modes = modes  # type: ignore[attr-defined]
    return run


def test_shrink_writes_the_shared_config_from_its_arguments_then_restarts_and_leave_undoes_it(run):
    done, calls = run("small", "enter", "shrink")
    assert done.returncode == 0, done.stderr
    assert (run.modes / "small.mode").read_text() == (
        "SPARKGUARD_VLLM_MODE=shared\nSPARKGUARD_VLLM_CONFIG=/srv/sg-vllm-configs/small.shared.yaml\n")
    assert calls == ["try-restart sparkguard-vllm@small.service"]
    done, calls = run("small", "leave", "shrink")
    assert done.returncode == 0 and not (run.modes / "small.mode").exists()
    assert calls == ["--no-block try-restart sparkguard-vllm@small.service"]


@pytest.mark.parametrize("enabled,started", [(True, True), (False, False)])
def test_stop_keeps_the_server_stopped_until_leave_and_leave_starts_only_an_enabled_one(run, enabled, started):
    done, calls = run("big", "enter", "stop")
    assert done.returncode == 0 and (run.modes / "big.mode").read_text() == "SPARKGUARD_VLLM_MODE=stopped\n"
    assert calls == ["stop sparkguard-vllm@big.service"]
    done, calls = run("big", "leave", "stop", enabled=enabled)
    assert done.returncode == 0 and not (run.modes / "big.mode").exists()
    assert ("--no-block start sparkguard-vllm@big.service" in calls) == started


@pytest.mark.parametrize("args,words", [
    (("small", "enter"), "usage"),
    (("small", "enter", "grow"), "unknown action/policy"),
    (("../etc", "enter", "stop"), "not a model name"),
    (("", "enter", "stop"), "not a model name"),
])
def test_bad_arguments_are_refused_with_exit_2_and_touch_nothing(run, args, words):
    done, calls = run(*args)
    assert done.returncode == 2 and words in done.stderr and calls == []
    assert not run.modes.exists() or not any(run.modes.iterdir())


def test_a_relative_mode_directory_is_refused(run):
    done, calls = run("small", "enter", "stop", mode_dir="run/vllm")
    assert done.returncode == 2 and "absolute" in done.stderr and calls == []


def test_the_unit_passes_the_roles_paths_in_the_scripts_order():
    from sparkguard.roles.vllm.state import MODE_DIR, MODE_SCRIPT, VLLM_CONFIG_DIR
    from sparkguard.templating import render_template

    unit = render_template("vllm/training@.service.j2", mode_script=MODE_SCRIPT, mode_dir=MODE_DIR,
                           config_dir=VLLM_CONFIG_DIR, training_target="t.target", policy="stop", sandbox="")
    assert f"ExecStart={MODE_SCRIPT} {MODE_DIR} {VLLM_CONFIG_DIR} %i enter stop" in unit
    assert f"ExecStop={MODE_SCRIPT} {MODE_DIR} {VLLM_CONFIG_DIR} %i leave stop" in unit
    assert Path(MODE_SCRIPT_SOURCE).read_text().startswith("#!/bin/sh\n")
