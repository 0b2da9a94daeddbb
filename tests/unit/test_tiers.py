"""The suite's tiers: unit first, then sandbox nodes, then VMs, and a red unit tier stops the run there.

Run in a throw-away project whose conftest is the suite's own (tests/conftest.py), so what is held is
the hook the real suite runs, not a copy: a sandbox test there would write a file if it ran.
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO, tier_of


@pytest.mark.parametrize("nodeid,tier", [
    ("tests/unit/test_x.py::test_y", "unit"),
    ("tests/sandbox/test_x.py::test_y[a/b]", "sandbox"),
    ("tests/vm/test_x.py::test_y", "vm"),
    ("sparkguard/state.py::sparkguard.state.Thing", "unit"),     # doctests
    ("roles/swap/fstab.py::roles.swap.fstab.enable_swap_lines", "unit"),
    ("tests/test_loose.py::test_y", "unit"),
])
def test_a_tests_tier_is_its_folder(nodeid, tier):
    assert tier_of(nodeid) == tier


@pytest.fixture
def project(tmp_path):
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "tests" / "sandbox").mkdir()
    (tmp_path / "conftest.py").write_text(
        f"import sys\nsys.path.insert(0, {str(REPO)!r})\nfrom tests.conftest import *  # noqa: F401,F403\n")
    ran = tmp_path / "sandbox-ran"
    (tmp_path / "tests" / "sandbox" / "test_node.py").write_text(textwrap.dedent(f"""
        from pathlib import Path
        def test_boots_a_node():
            Path({str(ran)!r}).write_text("ran")
    """))

    def run(unit_passes: bool, *options: str) -> tuple[subprocess.CompletedProcess, bool]:
        (tmp_path / "tests" / "unit" / "test_fast.py").write_text(f"def test_fast():\n    assert {unit_passes}\n")
        ran.unlink(missing_ok=True)
        # The sandbox module is named first: the tiers still put the unit test before it.
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *options,
                                 "tests/sandbox", "tests/unit"], cwd=tmp_path, capture_output=True, text=True)
        return result, ran.exists()
    return run


def test_a_red_unit_tier_stops_the_run_before_any_node(project):
    result, ran = project(False)
    assert result.returncode == 1 and not ran, result.stdout
    assert "unit test(s) failed, so the sandbox and VM tiers were not run" in result.stdout


def test_a_green_unit_tier_goes_on_and_all_tiers_goes_on_anyway(project):
    result, ran = project(True)
    assert result.returncode == 0 and ran, result.stdout
    result, ran = project(False, "--all-tiers")
    assert result.returncode == 1 and ran, result.stdout


def test_markers_pick_one_tier(project):
    result, ran = project(True, "-m", "unit")
    assert result.returncode == 0 and not ran and "1 passed, 1 deselected" in result.stdout, result.stdout


def _collected(marker_expression: str) -> set[str]:
    result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                             "-m", marker_expression, "tests/sandbox", "tests/vm"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode in (0, 5), result.stdout + result.stderr
    return {line for line in result.stdout.splitlines() if "::" in line}


def test_the_full_runs_phases_take_every_node_test_exactly_once():
    """dev.sh's node_tiers: every sandbox and VM test but the replays on xdist workers, then the replays alone.
    A test no phase selects would never run in CI; one both phases select would run twice, and a replay in the
    first phase would size memory while a VM boots beside it."""
    script = (REPO / "dev.sh").read_text()
    body = script[script.index("node_tiers() {"):script.index("run_tests() {")]
    phases = [e.strip('"') for e in re.findall(r'pytest_run [^\n]*?-m ("[^"]+"|\S+)', body)]
    assert len(phases) == 2, phases
    picked = [_collected(expression) for expression in phases]
    every = _collected("sandbox or vm")
    assert every and set().union(*picked) == every
    assert sum(len(p) for p in picked) == len(every), "a node test is in two phases"
    replays = _collected("replay")
    assert picked[1] == replays, "the last phase is the replays, alone"
    first = next(line for line in body.splitlines() if line.strip().startswith("pytest_run"))
    assert "--dist loadgroup" in first, "the first phase hands out groups of tests that share a node (tests/node_groups.py)"
