"""One version, declared in step: pyproject, the package, the CHANGELOG and `sparkguard --version`."""

from __future__ import annotations

from tests.conftest import run_cli


def test_one_version_everywhere():
    """pyproject, the package and the CHANGELOG's newest entry name the same version."""
    import re
    import tomllib
    from pathlib import Path

    import sparkguard

    repo = Path(__file__).resolve().parents[2]
    declared = tomllib.loads((repo / "pyproject.toml").read_text())["project"]["version"]
    newest = re.search(r"^## (\S+)", (repo / "CHANGELOG.md").read_text(), re.M)
    assert newest and declared == sparkguard.__version__ == newest.group(1)
    assert run_cli("--version").stdout.strip() == f"sparkguard {declared}"
