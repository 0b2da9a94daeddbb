"""earlyoom-check-args (roles/earlyoom/files/check-args.sh), run for real against a stand-in earlyoom.

No earlyoom runs here (the sandbox tests run the real 1.7 and 1.8 through apply). The stand-in prints what
earlyoom 1.7 prints on stderr once every argument is parsed (the format of its main.c: the SIGTERM line, then
the indented SIGKILL line), exits as it does on a bad argument (15 for -m), or says nothing and runs on.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "roles" / "earlyoom" / "files" / "check-args.sh"

BANNER_1_7 = ("earlyoom 1.7\nmem total: 7954 MiB, swap total:    0 MiB\n"
              "sending SIGTERM when mem <= 10.00% and swap <= 5.00%,\n"
              "        SIGKILL when mem <=  5.00% and swap <=  2.50%\n")

STAND_IN = """#!/bin/sh
echo "$$" > "{pids}"
case "$STAND_IN" in
  banner) printf '%s' "$BANNER" >&2; exec sleep 60;;
  reject) printf 'earlyoom 1.7\\nfatal: -m: invalid percentage\\n' >&2; exit 15;;
  silent) exec sleep 60;;
esac
"""


@pytest.fixture
def stand_in(tmp_path):
    (tmp_path / "bin").mkdir()
    fake = tmp_path / "bin" / "earlyoom"
    fake.write_text(STAND_IN.format(pids=tmp_path / "pid"))
    fake.chmod(0o755)
    candidate = tmp_path / "earlyoom.candidate"
    candidate.write_text("# managed\nEARLYOOM_ARGS=-m 5\n")

    def check(behaviour: str, content: str | None = None) -> subprocess.CompletedProcess:
        if content is not None:
            candidate.write_text(content)
        env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "STAND_IN": behaviour,
               "BANNER": BANNER_1_7}
        return subprocess.run(["sh", str(SCRIPT), str(candidate), "-m", "5"], env=env, capture_output=True,
                              text=True, timeout=30)

    yield check, tmp_path / "pid"


def _alive(pid_file: Path) -> bool:
    if not pid_file.exists():
        return False
    try:
        state = Path(f"/proc/{pid_file.read_text().strip()}/stat").read_text().split()[2]
    except FileNotFoundError:
        return False
    return state != "Z"


@pytest.mark.parametrize("behaviour,accepted", [
    ("banner", True),   # parsed every argument and entered its loop: accepted without waiting 2 s
    ("silent", True),   # no banner, still running after 2 s: accepted, as before
    ("reject", False),  # exited on an argument: rejected, with earlyoom's own words
])
def test_earlyoom_decides(stand_in, behaviour, accepted):
    check, pid_file = stand_in
    done = check(behaviour)
    assert (done.returncode == 0) is accepted, done.stderr
    if not accepted:
        assert "earlyoom rejected the arguments (exit 15)" in done.stderr and "-m: invalid" in done.stderr
    assert not _alive(pid_file), "the dry-run earlyoom was left running"


def test_a_file_with_more_than_the_arguments_is_refused_before_earlyoom_runs(stand_in):
    check, pid_file = stand_in
    done = check("banner", "EARLYOOM_ARGS=-m 5\nEARLYOOM_ARGS=-m 9\n")
    assert done.returncode == 1 and "exactly one EARLYOOM_ARGS line" in done.stderr
    assert not pid_file.exists()
