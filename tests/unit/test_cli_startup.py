"""The offline commands start without pyinfra and paramiko (they are most of a command's start-up time).

validate, render, plan, estimate and docs never contact a node; the CLI imports only the command asked
for (sparkguard.cli.main.build_parser), and sparkguard/errors.py, facts.py and audit/checks.py import no pyinfra.
Measured here: `sparkguard validate inventory/example` 0.93 s before, 0.45 s after.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.conftest import REPO

PROGRAM = """
import sys
from sparkguard.cli.main import main
code = 1
try:
    code = main(sys.argv[1:])
except SystemExit as exit:  # --help
    code = exit.code
finally:
    loaded = sorted(m for m in ("pyinfra", "paramiko") if m in sys.modules)
    print("LOADED=" + ",".join(loaded), file=sys.stderr)
sys.exit(code)
"""


def loaded_by(*args: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-c", PROGRAM, *args], capture_output=True, text=True, cwd=REPO,
                          timeout=120)
    line = next(line for line in done.stderr.splitlines() if line.startswith("LOADED="))
    return done.returncode, line.removeprefix("LOADED=")


@pytest.mark.parametrize("args", [
    ("validate", "inventory/example"),
    ("plan", "inventory/example"),
    ("estimate", "--model", "Llama-3.1-8B", "--method", "lora", "--seq-len", "2048", "--micro-batch", "1"),
])
def test_an_offline_command_loads_no_pyinfra(args):
    code, loaded = loaded_by(*args)
    assert code in (0, 3) and loaded == ""


def test_render_loads_no_pyinfra(tmp_path):
    code, loaded = loaded_by("render", "inventory/example", "--out", str(tmp_path / "out"))
    assert code == 0 and loaded == ""


def test_apply_does_load_it():
    """The check can fail: a command that talks to nodes loads pyinfra with its module."""
    _, loaded = loaded_by("apply", "--help")
    assert loaded == "paramiko,pyinfra"
