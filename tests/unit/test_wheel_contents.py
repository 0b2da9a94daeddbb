"""The wheel ships the product only: no test harness, no benchmark, no qemu VM machinery.

Built from the tracked files alone (a copy made with ``git ls-files``), the way a release would be,
so nothing the working tree happens to hold can hide a leak or fill a gap.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# Top-level folders that are development machinery: none of them may appear in the wheel.
DEV_ONLY = ("tests", "bench", "tools", "docs", ".ci")
# Modules that only the test harness uses (the qemu VM harness lived in sparkguard/vm.py once).
HARNESS_MARKERS = ("conftest", "harness", "qemu", "/vm.py", "pytest")


@pytest.fixture(scope="module")
def wheel_names(tmp_path_factory) -> list[str]:
    if not shutil.which("git") or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout to list the tracked files")
    source = tmp_path_factory.mktemp("source")
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if (REPO / name).is_file():
            shutil.copy2(REPO / name, target)
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
                            "-w", str(out), str(source)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = out.glob("sparkguard-*.whl")
    return zipfile.ZipFile(wheel).namelist()


def test_the_wheel_holds_the_product_packages(wheel_names):
    assert "sparkguard/cli.py" in wheel_names
    assert "sparkguard/runner.py" in wheel_names
    assert "roles/earlyoom/state.py" in wheel_names


def test_the_wheel_holds_no_development_machinery(wheel_names):
    top_level = {name.split("/", 1)[0] for name in wheel_names}
    assert top_level & set(DEV_ONLY) == set(), sorted(top_level)
    harness = [name for name in wheel_names if any(marker in name for marker in HARNESS_MARKERS)]
    assert harness == []
