"""Build sparkguard's wheel from the tracked files and install it into a fresh venv, as an operator would."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def build_wheel(workdir: Path) -> Path:
    """The wheel of the tracked files (a copy made with ``git ls-files``: nothing untracked leaks in or hides a gap)."""
    source = workdir / "source"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    out = workdir / "wheel"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--disable-pip-version-check",
                            "-w", str(out), str(source)], capture_output=True, text=True, timeout=600)
    if built.returncode != 0:
        raise AssertionError(built.stderr[-3000:])
    (wheel,) = out.glob("sparkguard-*.whl")
    return wheel


def install(wheel: Path, venv: Path) -> Path:
    """A fresh venv with the wheel (and its pinned dependencies from the registry); returns its bin/."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
                                str(wheel)], capture_output=True, text=True, timeout=900)
    if installed.returncode != 0:
        raise AssertionError(installed.stderr[-3000:])
    return venv / "bin"
