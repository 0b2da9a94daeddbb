"""Render: deterministic, byte-identical to the golden copy of inventory/example.

Regenerate the golden copy after an intended change with
``SPARKGUARD_UPDATE_GOLDEN=1 pytest tests/unit/test_render.py`` and review the diff.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from sparkguard.engine.render import render_inventory
from sparkguard.inventory.loader import load_inventory
from tests.conftest import REPO, run_cli

GOLDEN = REPO / "tests" / "golden" / "example"


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_render_is_deterministic(tmp_path):
    inventory = load_inventory(REPO / "inventory" / "example")
    render_inventory(inventory, tmp_path / "a")
    render_inventory(load_inventory(REPO / "inventory" / "example"), tmp_path / "b")
    assert tree(tmp_path / "a") == tree(tmp_path / "b")


def test_render_matches_golden_example(tmp_path):
    out = tmp_path / "render"
    result = run_cli("render", "inventory/example", "--out", str(out))
    assert result.returncode == 0, result.stderr
    if os.environ.get("SPARKGUARD_UPDATE_GOLDEN"):
        shutil.rmtree(GOLDEN, ignore_errors=True)
        shutil.copytree(out, GOLDEN)
    assert tree(out) == tree(GOLDEN)


def test_rerender_removes_files_a_role_no_longer_manages(tmp_path):
    out = tmp_path / "render"
    render_inventory(load_inventory(REPO / "inventory" / "example"), out)
    stale = out / "spark-01" / "etc" / "stale.conf"
    stale.write_text("old")
    render_inventory(load_inventory(REPO / "inventory" / "example"), out)
    assert not stale.exists()


def test_render_refuses_without_declared_memory(inventory_dir, tmp_path):
    path = inventory_dir("all:\n  hosts:\n    h1: {ssh_host: 192.0.2.1}\n")
    result = run_cli("render", str(path), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "field 'node.memory_total_gib'" in result.stderr


def test_node_json_holds_settings_but_no_connection_details(tmp_path):
    import json

    render_inventory(load_inventory(REPO / "inventory" / "example"), tmp_path)
    document = json.loads((tmp_path / "spark-01/etc/sparkguard/node.json").read_text())
    assert document["node"]["memory_total_bytes"] == round(121.7 * 2**30)
    assert document["settings"]["base"]["contact"].startswith("ml-infra")
    assert "ssh_host" not in json.dumps(document)
