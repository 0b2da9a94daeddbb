"""Apply sparkguard roles to the test VM (only the roles under test: TCG is slow)."""

from __future__ import annotations

import json
from pathlib import Path

from sparkguard.engine.converge import site_deploy
from sparkguard.inventory.loader import load_inventory
from sparkguard.roles import ROLES
from sparkguard.run.runner import run_deploy


def vm_inventory(vm_node, directory: Path, extra_vars: str, keep: set[str]) -> Path:
    """The VM's inventory with only ``keep`` roles enabled, plus extra ``vars:`` YAML lines."""
    directory = vm_node.write_inventory(directory)
    text = (directory / "hosts.yml").read_text()
    disabled = "".join(f"    {role.name}: {{enabled: false}}\n" for role in ROLES if role.name not in keep)
    text = text.replace("  vars:\n", f"  vars:\n{disabled}{extra_vars}", 1)
    (directory / "hosts.yml").write_text(text)
    return directory


def apply(directory: Path):
    result = run_deploy(load_inventory(directory), site_deploy)
    assert result.ok, json.dumps(result.as_dict(), indent=1, default=str)
    return result


def converge(vm_node, directory: Path, extra_vars: str, keep: set[str]) -> Path:
    """Apply twice; the second apply must change nothing."""
    directory = vm_inventory(vm_node, directory, extra_vars, keep)
    apply(directory)
    second = apply(directory)
    assert second.changed == 0, second.hosts[0].changed_names
    return directory
