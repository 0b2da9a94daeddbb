"""The layers, read from the import statements themselves (module level and inside functions).

- The core (sparkguard/) imports no role: only its entry points do, to hand the roles to
  sparkguard.registry (the CLI, and the adapter plain pyinfra loads as an inventory).
- A role knows only itself and the roles it declares (Role.requires, uses, reads): it reads another role's
  settings only through that role's settings class (sparkguard.hostconfig.settings_of), never through an
  untyped ``config.<role>`` or ``ctx.settings("<role>")``; of its modules it imports only ``settings`` and
  ``interface`` (the names it owns and offers: a target, a unit prefix, a file).
- The product imports nothing from tests/ (the test harness is not shipped).
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ENTRY_POINTS = {"sparkguard/cli/main.py", "sparkguard/pyinfra_inventory.py", "sparkguard/deploys.py"}


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
    """The folder's Python files; not through a link (sparkguard/roles links to roles/, which is not the core)."""
    return sorted((REPO / folder).rglob("*.py"))


def is_role_module(name: str) -> bool:
    return name in ("roles", "sparkguard.roles") or name.startswith(("roles.", "sparkguard.roles."))


def test_the_core_imports_no_role_except_its_entry_points():
    offenders = {str(p.relative_to(REPO)): sorted(m for m in imports(p) if is_role_module(m))
                 for p in modules("sparkguard") if str(p.relative_to(REPO)) not in ENTRY_POINTS}
    assert {p: m for p, m in offenders.items() if m} == {}


def test_the_roles_have_one_import_name():
    """``sparkguard.roles``, in a checkout (sparkguard/roles links to roles/) as in the wheel: a module imported
    as ``roles.x`` too would be a second copy, whose settings classes the registry's are not."""
    link = REPO / "sparkguard" / "roles"
    assert link.is_symlink() and link.resolve() == REPO / "roles"
    offenders = {str(p.relative_to(REPO)): sorted(m for m in imports(p) if m == "roles" or m.startswith("roles."))
                 for folder in ("sparkguard", "roles", "tests", "bench", "deploy", "docs") for p in modules(folder)}
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


def role_packages() -> list[Path]:
    return sorted(p for p in (REPO / "roles").iterdir() if (p / "__init__.py").exists())


def cross_role_references(role: str, path: Path, names: set[str]) -> list[tuple[str, str]]:
    """(other role, how) for every place ``path`` (in role ``role``) names another role of ``names``: an import of
    its modules (``roles.x...`` or ``..x...``), a ``.settings("x")`` call, or a ``config.x`` / ``cfg.x`` /
    ``<...>.config.x`` attribute (an untyped read of its block)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".") if node.module else []
            if node.level == 0 and module[:2] == ["sparkguard", "roles"]:
                parts = module[2:]
            elif node.level == 0 and module[:1] == ["roles"]:
                parts = module[1:]
            elif node.level == 2:
                parts = module
            else:
                continue
            # `from roles import vllm`, `from ..vllm import state`: the names imported are modules of the role
            imported = [parts] if len(parts) >= 2 else [parts + [alias.name] for alias in node.names]
            found += [(each[0], "import " + ".".join(each)) for each in imported if each[0] != role]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                parts = parts[1:] if parts[:2] == ["sparkguard", "roles"] else parts
                if parts[0] == "roles" and len(parts) > 1 and parts[1] != role:
                    found.append((parts[1], "import " + alias.name))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "settings":
            if node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in names - {role}:
                found.append((node.args[0].value, f'untyped settings("{node.args[0].value}")'))
        elif isinstance(node, ast.Attribute) and node.attr in names - {role}:
            owner = node.value
            if (isinstance(owner, ast.Name) and owner.id in ("config", "cfg")) or (
                    isinstance(owner, ast.Attribute) and owner.attr == "config"):
                found.append((node.attr, f"untyped config.{node.attr}"))
    return found


def test_a_role_reads_another_only_typed_and_only_where_it_declares_it():
    """The meaning-level edges: earlyoom reads vllm (serving's band and units) and swap (its job units), swap
    and monitoring read earlyoom (its lines), swap reads budget (its file) and vllm (its mode files), recovery,
    swap, vllm and monitoring use base's target or sysctl checker, budget reads vllm's models and earlyoom's
    lines into the node's plan, and vllm sizes its servers from that plan. Each is declared on the Role and goes through the other
    role's settings class; an undeclared or untyped read fails here."""
    from sparkguard.roles import ROLES

    declared = {role.name: set(role.requires) | set(role.uses) | set(role.reads) for role in ROLES}
    names = set(declared)
    offenders, used = {}, {name: set() for name in names}
    for package in role_packages():
        for path in package.rglob("*.py"):
            for other, how in cross_role_references(package.name, path, names):
                used[package.name].add(other)
                typed = how in (f"import {other}.settings", f"import {other}.interface")
                if other not in declared[package.name] or not typed:
                    offenders.setdefault(str(path.relative_to(REPO)), []).append(how)
    assert offenders == {}
    # A declared read that nothing reads is a stale edge.
    assert {role.name: sorted(set(role.reads) - used[role.name]) for role in ROLES if set(role.reads) - used[role.name]} == {}
    assert used == {"base": set(), "budget": {"vllm", "earlyoom"}, "earlyoom": {"vllm", "swap"},
                    "monitoring": {"earlyoom", "base"}, "recovery": {"base"},
                    "swap": {"earlyoom", "base", "budget", "vllm"}, "vllm": {"base", "budget"}}


def test_the_core_reads_no_roles_settings():
    """The memory arithmetic stays in the core (sparkguard/domain/memory/planner.py), but what a role's settings mean for it
    is read by the role (roles/budget/plan.py): no core module reads ``config.<role>`` or ``settings("<role>")``."""
    from sparkguard.roles import ROLES

    names = {role.name for role in ROLES}
    found = {str(path.relative_to(REPO)): how for path in sorted((REPO / "sparkguard").rglob("*.py"))
             if (how := [h for _, h in cross_role_references("", path, names) if not h.startswith("import ")])}
    assert found == {}


def test_the_edge_check_catches_an_untyped_or_undeclared_read(tmp_path):
    """The check itself has teeth: each way of reaching another role is found."""
    path = tmp_path / "m.py"
    path.write_text("from ..vllm.settings import VllmSettings\nfrom roles.base import state\n"
                    "from sparkguard.roles.earlyoom import audit\n"
                    "x = ctx.settings('vllm').oom_score_adj\ny = config.earlyoom.term_percent\n"
                    "z = ctx.config.base.enabled\nw = config.swap_like\n")
    found = cross_role_references("swap", path, {"vllm", "base", "earlyoom", "swap"})
    assert sorted(found) == sorted([
        ("vllm", "import vllm.settings"), ("base", "import base.state"), ("earlyoom", "import earlyoom.audit"),
        ("vllm", 'untyped settings("vllm")'),
        ("earlyoom", "untyped config.earlyoom"), ("base", "untyped config.base")])


def test_the_core_layout_holds_only_shared_directories():
    """A target, unit or file that one role owns is in that role's interface.py, not in the core's layout."""
    from sparkguard import layout

    owned = [name for name in vars(layout) if name.isupper() and not name.endswith("_DIR")]
    assert owned == []


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
            parts = ["sparkguard", *parts] if folder == "roles" else parts   # imported as sparkguard.roles
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    assert [n for n in names if not covered(n)] == []


def resolved_imports(path: Path, text: str | None = None) -> set[str]:
    """Every module ``path`` imports, relative imports resolved against its package (``from ..x import y``
    in sparkguard/cli/main.py is sparkguard.x); ``from . import name`` counts as the package and the name."""
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    package = parts[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text() if text is None else text, str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            found.add(module)
            found |= {f"{module}.{alias.name}" for alias in node.names}
    return found


# A part of the package, and who may import it: the command line and the sandbox are ways in, never used by
# the engine, a run, the audit or a role.
IMPORTED_ONLY_FROM = {
    "sparkguard.cli": ("sparkguard/cli/",),
    "sparkguard.dev": ("sparkguard/dev/", "sparkguard/cli/"),
}


def test_the_command_line_and_the_sandbox_are_imported_by_nothing_below_them():
    offenders = {}
    for folder in ("sparkguard", "roles", "deploy"):
        for path in modules(folder):
            where = str(path.relative_to(REPO))
            for name in resolved_imports(path):
                for part, allowed in IMPORTED_ONLY_FROM.items():
                    if (name == part or name.startswith(part + ".")) and not where.startswith(allowed):
                        offenders.setdefault(where, []).append(name)
    assert offenders == {}


def test_resolved_imports_see_a_relative_import_of_the_command_line():
    """The check above reads relative imports as the interpreter does: a run module importing the CLI is caught."""
    seen = resolved_imports(REPO / "sparkguard" / "run" / "rollout.py",
                            "from ..cli.console import console\nfrom . import context\nfrom ...x import y\n")
    assert {"sparkguard.cli.console", "sparkguard.cli.console.console", "sparkguard.run.context"} <= seen


def test_a_role_keeps_its_node_side_programs_in_files_and_has_a_document():
    """roles/<name>/ holds the role's Python (run on the operator's machine); what runs on the node is in its
    files/ folder, shipped as it is; each role has docs/roles/<name>.md."""
    from sparkguard.roles import ROLES

    misplaced = sorted(str(p.relative_to(REPO)) for p in (REPO / "roles").glob("*/*")
                       if p.is_file() and p.suffix != ".py" and p.parent.name != "__pycache__")
    assert misplaced == []
    for role in ROLES:
        assert (REPO / "docs" / "roles" / f"{role.name}.md").is_file(), role.name
        files = REPO / "roles" / role.name / "files"
        assert not (files / "__init__.py").exists()      # programs, not a package of the role's code
        for program in sorted(files.glob("*")) if files.is_dir() else []:
            state = (REPO / "roles" / role.name / "state.py").read_text()
            assert f'"{program.name}"' in state, f"{program} is shipped by no line of its role's state.py"
