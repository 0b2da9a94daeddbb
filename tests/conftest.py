"""Shared test helpers: run the CLI as an operator would, write small inventories."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import roles

roles.register()  # the tests call the core directly, as an entry point would

REPO = Path(__file__).resolve().parent.parent
SPARKGUARD = [sys.executable, "-m", "sparkguard.cli"]
# init's --pin for tests: where CI would install sparkguard from (any reachable commit URL; never fetched here).
INIT_PIN = ["--pin", "git+https://example.org/sparkguard.git@" + "0" * 40]


def run_cli(*args: str, cwd: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([*SPARKGUARD, *args], capture_output=True, text=True, cwd=cwd or REPO, timeout=timeout)


def write_inventory(directory: Path, text: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "hosts.yml").write_text(textwrap.dedent(text))
    return directory


@pytest.fixture
def inventory_dir(tmp_path):
    """Write an inventory: ``inventory_dir(text)`` returns its directory."""
    counter = iter(range(1000))
    return lambda text: write_inventory(tmp_path / f"inv{next(counter)}", text)


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_root_and_tools(what: str, missing_tools: list[str]) -> None:
    """Tests that boot nodes need root and host tools: fail in CI (never a silent skip), skip elsewhere."""
    reason = None
    if os.geteuid() != 0:
        reason = f"{what} need root"
    elif missing_tools:
        reason = f"{what} need {', '.join(missing_tools)} (./dev.sh install installs them)"
    if reason:
        if in_ci():
            pytest.fail(reason)
        pytest.skip(reason)


def pytest_terminal_summary(terminalreporter) -> None:
    from tests.reporting import LINES

    if LINES:
        terminalreporter.section("sparkguard figures")
        for line in LINES:
            terminalreporter.write_line(line)
