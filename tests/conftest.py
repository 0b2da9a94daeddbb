"""Shared test helpers: run the CLI as an operator would, write small inventories."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sparkguard import roles

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


def pytest_configure(config) -> None:
    """The main process makes the directory xdist workers leave their figures in (tests/reporting.py), and
    the test groups of the full run's first phase (tests/node_groups.py)."""
    import tempfile

    from tests.node_groups import GROUPS_FILE
    from tests.reporting import FIGURES_DIR

    if not hasattr(config, "workerinput"):
        os.environ[FIGURES_DIR] = tempfile.mkdtemp(prefix="sparkguard-figures-")
        os.environ[GROUPS_FILE] = str(Path(tempfile.mkdtemp(prefix="sparkguard-node-groups-")) / "groups.json")


def pytest_unconfigure(config) -> None:
    import shutil

    from tests.node_groups import GROUPS_FILE
    from tests.reporting import FIGURES_DIR

    if not hasattr(config, "workerinput") and os.environ.get(FIGURES_DIR):
        shutil.rmtree(os.environ.pop(FIGURES_DIR), ignore_errors=True)
        shutil.rmtree(Path(os.environ.pop(GROUPS_FILE)).parent, ignore_errors=True)


def pytest_terminal_summary(terminalreporter) -> None:
    from tests.reporting import all_lines

    lines = all_lines()
    if lines:
        terminalreporter.section("sparkguard figures")
        for line in lines:
            terminalreporter.write_line(line)


# Tiers, in the order the full run takes them: a broken unit test is reported within minutes, before
# a node boots. A test's tier is its folder (tests/unit, tests/sandbox, tests/vm); the doctests in the
# package and the roles are unit tests. `-m unit` (./dev.sh test --fast), `-m sandbox`, `-m vm` pick one.
TIERS = ("unit", "sandbox", "vm")


def tier_of(nodeid: str) -> str:
    """The tier of a test from its node ID (a path relative to the root directory, then ::names)."""
    parts = nodeid.split("::")[0].split("/")
    return parts[1] if parts[0] == "tests" and len(parts) > 2 and parts[1] in TIERS else "unit"


def pytest_addoption(parser) -> None:
    parser.addoption("--all-tiers", action="store_true",
                     help="run the sandbox and VM tiers even when a unit test failed (by default they are not)")


def pytest_collection_modifyitems(config, items) -> None:
    """Mark each test with its tier and run the tiers in order (a stable sort: modules keep their order).

    Under ``--dist loadgroup`` (dev.sh's first phase) the node tests are also grouped by the nodes they share
    and put heaviest group first (tests/node_groups.py)."""
    for item in items:
        item.add_marker(tier_of(item.nodeid))
    items.sort(key=lambda item: TIERS.index(tier_of(item.nodeid)))
    from tests.node_groups import schedule, wanted

    if wanted(config):
        # The full run's first phase (dev.sh): node tests over xdist workers, a group of them at a time.
        nodes = [item for item in items if tier_of(item.nodeid) != "unit"]
        schedule(nodes)
        items[len(items) - len(nodes):] = nodes


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under ``--dist loadgroup``, hand out whole groups of node tests (tests/node_groups.py says why ours)."""
    from tests.node_groups import NodeGroupScheduling

    return NodeGroupScheduling(config, log) if config.getoption("dist") == "loadgroup" else None


_UNIT_FAILURES: list[str] = []


def pytest_runtest_logreport(report) -> None:
    if report.failed and tier_of(report.nodeid) == "unit":
        _UNIT_FAILURES.append(report.nodeid)


def pytest_runtest_setup(item) -> None:
    """Fail fast: once the unit tier has failed, the slow tiers would only add an hour to a red run."""
    if _UNIT_FAILURES and tier_of(item.nodeid) != "unit" and not item.config.getoption("--all-tiers"):
        item.session.shouldfail = (f"{len(_UNIT_FAILURES)} unit test(s) failed, so the sandbox and VM tiers were "
                                   f"not run (--all-tiers runs them anyway); first: {_UNIT_FAILURES[0]}")
        pytest.skip("the unit tier failed")
