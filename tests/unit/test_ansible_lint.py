"""The Ansible export passes the tools an Ansible team runs on it: yamllint and ansible-lint's production
profile, each with the settings the export ships (OUT/.yamllint, OUT/.ansible-lint), zero findings.

The README's own example is exported as it is, and once more with a webhook read from the environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("lint") / "ansible"
    done = run_cli("render", str(REPO / "inventory" / "example"), "--format", "ansible", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def _run(tool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / tool), *args], cwd=cwd, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_COLOR": "1", "ANSIBLE_NOCOLOR": "1"})


def test_yamllint_finds_nothing_with_the_shipped_settings(exported):
    done = _run("yamllint", "--strict", "-f", "parsable", ".", cwd=exported)
    assert done.returncode == 0 and done.stdout == "", done.stdout[-4000:]


def test_ansible_lint_production_profile_finds_nothing(exported):
    done = _run("ansible-lint", "--offline", "--nocolor", "-f", "pep8", cwd=exported)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    assert "Passed" in done.stdout + done.stderr and "production" in done.stdout + done.stderr
