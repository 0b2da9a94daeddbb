"""The layers, read from the import statements themselves (module level and inside functions).

- The core (sparkguard/) imports no role: only its entry points do, to hand the roles to
  sparkguard.registry (the CLI, and the adapter plain pyinfra loads as an inventory).
- A role knows only itself: nothing under roles/<name>/ imports another role.
- The product imports nothing from tests/ (the test harness is not shipped).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENTRY_POINTS = {"sparkguard/cli.py", "sparkguard/pyinfra_inventory.py", "sparkguard/deploys.py"}


def imports(path: Path) -> set[str]:
    """Every absolute module name ``path`` imports, anywhere in the file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def modules(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.py"))


def test_the_core_imports_no_role_except_its_entry_points():
    offenders = {str(p.relative_to(REPO)): sorted(m for m in imports(p) if m == "roles" or m.startswith("roles."))
                 for p in modules("sparkguard") if str(p.relative_to(REPO)) not in ENTRY_POINTS}
    assert {p: m for p, m in offenders.items() if m} == {}


def test_entry_points_do_hand_the_roles_over():
    """Each entry point hands the shipped roles over through sparkguard.builtin_roles (which finds them in a
    checkout or an installed wheel); nothing else in the core does."""
    for entry in sorted(ENTRY_POINTS | {str(p.relative_to(REPO)) for p in modules("deploy")}):
        text = (REPO / entry).read_text()
        assert "builtin_roles.register()" in text or (
            "from sparkguard.builtin_roles import register" in text and "\nregister()" in text), entry
    users = {str(p.relative_to(REPO)) for p in modules("sparkguard") if "builtin_roles" in p.read_text()}
    assert users <= ENTRY_POINTS | {"sparkguard/builtin_roles.py"}, users


def test_a_role_imports_no_other_role():
    offenders = {}
    for package in sorted(p for p in (REPO / "roles").iterdir() if (p / "__init__.py").exists()):
        for path in package.rglob("*.py"):
            others = sorted(m for m in imports(path) if m.startswith("roles.") and m.split(".")[1] != package.name)
            if others:
                offenders[str(path.relative_to(REPO))] = others
    assert offenders == {}


def test_the_product_imports_nothing_from_tests():
    offenders = {str(p.relative_to(REPO)): sorted(m for m in imports(p) if m == "tests" or m.startswith("tests."))
                 for folder in ("sparkguard", "roles", "deploy") for p in modules(folder)}
    assert {p: m for p, m in offenders.items() if m} == {}


def test_every_product_module_is_held_to_the_strict_type_flags():
    """A new module must be added to one of pyproject.toml's strict mypy overrides (the test command runs mypy)."""
    import tomllib

    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    patterns = [p for override in config["overrides"] if override.get("disallow_untyped_defs")
                for p in override["module"]]

    def covered(name: str) -> bool:
        return any(name == p or (p.endswith(".*") and (name == p[:-2] or name.startswith(p[:-1]))) for p in patterns)

    names = []
    for folder in ("sparkguard", "roles"):
        for path in modules(folder):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    assert [n for n in names if not covered(n)] == []
