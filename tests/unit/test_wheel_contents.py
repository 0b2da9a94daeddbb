"""The wheel ships the product only: no test harness, no benchmark, no qemu VM machinery.

Built from the tracked files alone (a copy made with ``git ls-files``), the way a release would be,
so nothing the working tree happens to hold can hide a leak or fill a gap.
"""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from tests.conftest import INIT_PIN
from tests.wheel import build_wheel, install

REPO = Path(__file__).resolve().parents[2]
# Top-level folders that are development machinery: none of them may appear in the wheel.
DEV_ONLY = ("tests", "bench", "tools", "docs", ".ci")
# Modules that only the test harness uses (the qemu VM harness lived in sparkguard/vm.py once).
HARNESS_MARKERS = ("conftest", "harness", "qemu", "/vm.py", "pytest")


@pytest.fixture(scope="module")
def wheel_path(tmp_path_factory) -> Path:
    if not shutil.which("git") or not (REPO / ".git").exists():
        pytest.skip("needs a git checkout to list the tracked files")
    return build_wheel(tmp_path_factory.mktemp("build"))


@pytest.fixture(scope="module")
def wheel_names(wheel_path) -> list[str]:
    return zipfile.ZipFile(wheel_path).namelist()


def test_the_wheel_holds_the_product_packages(wheel_names):
    """Every tracked product file is in the wheel, roles/templates/deploy mapped under sparkguard/."""
    tracked = subprocess.run(["git", "ls-files", "sparkguard", "roles", "templates", "deploy", "docs/*.md",
                              "docs/roles/*.md"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    mapped = {"roles": "sparkguard/roles", "templates": "sparkguard/templates", "deploy": "sparkguard/deploy_scripts",
              "docs": "sparkguard/docs"}
    expected = set()
    # The test VMs' doc stays out, like tests/; the checkout's link sparkguard/roles -> roles/ is the wheel's
    # mapped roles/ files themselves.
    for name in (n for n in tracked if n != "docs/vm-harness.md" and not (REPO / n).is_symlink()):
        top, _, rest = name.partition("/")
        expected.add(f"{mapped[top]}/{rest}" if top in mapped else name)
    assert sorted(expected - set(wheel_names)) == []
    assert "sparkguard/roles/monitoring/files/web-get.py" in wheel_names  # a program shipped as it is, beside its role
    assert "sparkguard/roles/swap/files/swap-toggle.sh" in wheel_names      # a node-side program of a role


def test_the_wheel_holds_no_development_machinery(wheel_names):
    top_level = {name.split("/", 1)[0] for name in wheel_names}
    # Only the sparkguard package: no top-level `roles`, `templates` or `deploy` to collide with other projects.
    assert {t for t in top_level if not t.endswith(".dist-info")} == {"sparkguard"}, sorted(top_level)
    assert top_level & set(DEV_ONLY) == set(), sorted(top_level)
    harness = [name for name in wheel_names if any(marker in name for marker in HARNESS_MARKERS)]
    assert [name for name in wheel_names if "/tests/" in name or name.startswith("tests/")] == []
    assert harness == []


def test_the_installed_wheel_works_from_anywhere(wheel_path, tmp_path):
    """A fresh venv outside the checkout, the wheel installed into it (its dependencies from the registry),
    run from an unrelated directory: validate, plan and render work, the render is byte-identical to the
    checkout's golden copy, and no top-level `roles` package was installed."""
    venv = tmp_path / "venv"
    bin_dir = install(wheel_path, venv)
    elsewhere = tmp_path / "operator-repo"
    shutil.copytree(REPO / "inventory" / "example", elsewhere / "inventory" / "prod")
    sparkguard = str(bin_dir / "sparkguard")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sparkguard, *args], cwd=elsewhere, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    assert "2 host(s) valid" in run("validate", "inventory/prod").stdout
    # A message names docs/earlyoom-measurements.md: the installed sparkguard prints it, from anywhere.
    assert run("docs", "--show", "docs/earlyoom-measurements.md").stdout.startswith("# ")
    assert "roles/swap" in run("docs", "--list").stdout.split()
    run("init", "scaffold", "--host", "gpu-01=192.0.2.31", *INIT_PIN)
    assert "1 host(s) valid: gpu-01" in run("validate", "scaffold/inventory/prod").stdout
    assert "verdict: FITS" in run("plan", "inventory/prod").stdout
    run("render", "inventory/prod", "--out", "rendered")
    golden = REPO / "tests" / "golden" / "example"
    for path in sorted(p for p in golden.rglob("*") if p.is_file()):
        assert (elsewhere / "rendered" / path.relative_to(golden)).read_bytes() == path.read_bytes(), path
    assert len([p for p in (elsewhere / "rendered").rglob("*") if p.is_file()]) == \
        len([p for p in golden.rglob("*") if p.is_file()])
    probe = subprocess.run([str(venv / "bin" / "python"), "-c", "import roles"], cwd=elsewhere, capture_output=True)
    assert probe.returncode != 0
    # The README's plain-pyinfra line: the site deploy the wheel carries, and init's adapter, read by the venv's
    # Python (pyinfra's) from the operator's repository.
    deploy = Path(run("docs", "--deploy", "site").stdout.strip())
    assert deploy.is_file() and venv in deploy.parents and deploy.name == "site.py"
    adapter = subprocess.run([str(venv / "bin" / "python"), "-c", "import runpy, sys; g = runpy.run_path(sys.argv[1]); "
                              "print(sorted(name for name, _ in g['all'][0]))", "scaffold/inventory/prod/inventory.py"],
                             cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert adapter.returncode == 0 and adapter.stdout.strip() == "['gpu-01']", adapter.stdout + adapter.stderr
