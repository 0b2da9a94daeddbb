"""Render every file each host would receive, for review in pull requests.

Output: ``OUT/<host>/<absolute path>`` with the exact bytes apply installs, and
``OUT/<host>.state.yml`` listing packages, modes, validators and services.
Deterministic: same inventory, same bytes. Secrets become a placeholder. Every file is written by
sparkguard.safe_write: never through a symbolic link, never over anything but a regular file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .. import safe_write
from ..errors import ConfigError, Problem
from ..facts import NodeInfo
from ..inventory.loader import Inventory, InventoryHost
from ..state import DesiredState, ManagedFile
from .desired import states_for

SECRET_PLACEHOLDER = "# secret: rendered on apply only; the value never leaves the operator's machine in a render\n"


def host_states(entry: InventoryHost, live: NodeInfo | None = None) -> list[DesiredState]:
    """Desired state of every enabled role for one host (pure: no SSH; ``live`` resolves 'auto' settings)."""
    return states_for(entry.name, entry.config, live)


def shown(managed: ManagedFile) -> str:
    """A file as render writes it: a secret file's review (secrets as <secret>), or the placeholder."""
    if not managed.secret:
        return managed.content
    return managed.review if managed.review is not None else SECRET_PLACEHOLDER


def _summary(states: list[DesiredState]) -> dict[str, Any]:
    return {
        state.role: {
            "packages": list(state.packages),
            "directories": [f"{d.path} {d.mode} {d.owner}:{d.group}" for d in state.directories],
            "files": [
                {"path": f.path, "mode": f.mode, "owner": f"{f.owner}:{f.group}",
                 **({"validate": f.validate} if f.validate else {}), **({"secret": True} if f.secret else {})}
                for f in state.files
            ],
            "services": [
                {"name": s.name,
                 **({"enabled": s.enabled} if s.enabled is not None else {}),
                 **({"running": s.running} if s.running is not None else {}),
                 **({"masked": s.masked} if s.masked is not None else {}),
                 **({"restart_on": list(s.restart_on)} if s.restart_on else {}),
                 **({"reload_on": list(s.reload_on)} if s.reload_on else {})}
                for s in state.services
            ],
            "sysctls": dict(sorted(state.sysctls.items())),
            "edits": [{"path": e.path, "edit": e.description, **({"validate": e.validate} if e.validate else {})}
                      for e in state.edits],
            "ensure": [{"state": e.description, "check": e.check, "fix": e.fix} for e in state.ensures],
            "absent": [{"files": list(a.globs), "why": a.description} for a in state.absent_files]
            + [{"instances_of": a.template, "keep": list(a.keep), "with": list(a.companions) + list(a.files),
                "why": a.description} for a in state.absent_instances],
        }
        for state in states
    }


def path_inside(root: Path, path: Path, host: str, what: str) -> Path:
    """``path`` if it stays under ``root`` (lexically: no '..', no absolute part), else a ConfigError.

    Render runs on a reviewer's machine against a pull request's inventory: nothing it writes or
    deletes may land outside --out, whatever a host name or a managed path says.
    """
    import os

    normal = Path(os.path.normpath(path))
    if normal == root or root not in normal.parents:
        raise ConfigError([Problem(host, "render", what, f"would be written outside {root}; refused")])
    return normal


def render_inventory(inventory: Inventory, out: Path) -> list[Path]:
    """Write the render; return the paths written (sorted)."""
    missing = [
        Problem(h.name, "node.memory_total_gib", None,
                "render needs the node's MemTotal declared (apply reads it from the node; render is offline)",
                h.sources.get("node.memory_total_gib", str(inventory.path / "hosts.yml")))
        for h in inventory.hosts if h.config.node.memory_total_gib is None
    ]
    if missing:
        raise ConfigError(missing)
    root = safe_write.output_directory(out)
    entries = sorted(inventory.hosts, key=lambda h: h.name)
    for entry in entries:  # before anything is written: a link or a non-file at a summary's place is refused
        path_inside(root, root / entry.name, entry.name, "host name")
        safe_write.check(root / f"{entry.name}.state.yml")
    written: list[Path] = []
    for entry in entries:
        host_dir = path_inside(root, root / entry.name, entry.name, "host name")
        states = host_states(entry)
        targets = [(managed, path_inside(host_dir, host_dir / managed.path.lstrip("/"), entry.name, managed.path))
                   for state in states for managed in state.files]
        safe_write.remove_tree(host_dir)  # OUT/<host>/ is render's own: a link there is removed, never followed
        for managed, target in targets:
            safe_write.write(target, shown(managed), root=root)
            written.append(target)
        summary = root / f"{entry.name}.state.yml"
        safe_write.write(summary, yaml.safe_dump(_summary(states), sort_keys=True, default_flow_style=False), root=root)
        written.append(summary)
    return sorted(written)
