"""sparkguard's own units stay confined: their systemd-analyze exposure never rises above docs/security.md."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from sparkguard.inventory import load_inventory
from sparkguard.render import render_inventory
from tests.conftest import in_ci

REPO = Path(__file__).resolve().parents[2]
DOCUMENTED = {m.group(1): float(m.group(2)) for m in re.finditer(
    r"^\| `(sparkguard-[^`]+\.service)` \| ([0-9.]+) \|", (REPO / "docs" / "security.md").read_text(), re.M)}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    if shutil.which("systemd-analyze") is None:
        if in_ci():
            pytest.fail("systemd-analyze is missing (package systemd): CI must run this test")
        pytest.skip("systemd-analyze not installed")
    out = tmp_path_factory.mktemp("render")
    render_inventory(load_inventory(REPO / "inventory" / "example"), out)
    return out


def exposure(root: Path, unit: str) -> float:
    run = subprocess.run(["systemd-analyze", "security", "--offline=yes", f"--root={root}", unit],
                         capture_output=True, text=True, timeout=60)
    match = re.search(r"Overall exposure level for \S+: ([0-9.]+)", run.stdout)
    assert match, run.stdout[-500:] + run.stderr[-500:]
    return float(match.group(1))


def test_every_sparkguard_unit_is_documented_and_no_more_exposed_than_documented(rendered):
    seen = {}
    for host in sorted(p for p in rendered.iterdir() if p.is_dir()):
        for unit in sorted((host / "etc" / "systemd" / "system").glob("sparkguard-*.service")):
            seen[unit.name] = max(seen.get(unit.name, 0.0), exposure(host, unit.name))
    assert set(seen) <= set(DOCUMENTED), f"document these units in docs/security.md: {set(seen) - set(DOCUMENTED)}"
    worse = {u: (e, DOCUMENTED[u]) for u, e in seen.items() if e > DOCUMENTED[u] + 0.05}
    assert not worse, f"exposure rose above docs/security.md: {worse}"
    # The sandboxed ones really are: a regression to an unconfined unit fails here.
    assert max(seen[u] for u in ("sparkguard-earlyoom-kills.service", "sparkguard-boot-report.service")) < 2

