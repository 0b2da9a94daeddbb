"""``sparkguard render --format ansible``: the desired states apply converges to, as an Ansible playbook.

For a team that runs Ansible (AWX, an existing pipeline), and for a benchmark of sparkguard against
ansible-playbook on identical work. Written under OUT:

- ``site.yml``: ONE static play (``sparkguard.ansible_play``); its tasks loop over per-host data, so all
  hosts run together with forks=N, in the order converge applies each kind.
- ``host_vars/<host>.yml``: that data, read from the same DesiredState objects render writes and apply
  converges (``render.host_states``). It is tagged ``!unsafe`` as a whole: file contents carry the
  ``{{ }}`` of Prometheus and Grafana templates, and Ansible must never template them.
- ``inventory.yml`` and ``ansible.cfg``: how to reach each host, from the sparkguard inventory.

Secrets are never read or written (``sparkguard.ansible_secrets``): a file that needs one looks it up
from the same environment variable or file, on the controller, when the play runs.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from ... import __version__, registry, safe_write
from ...engine.render import path_inside
from ...errors import ConfigError, Problem
from ...inventory.loader import Inventory, InventoryHost
from ...layout import STAGE_DIR
from ...state import DesiredState, FileEdit, ManagedFile, Service
from .play import ROLE_TASKS, header, plays, role_tasks
from .secret_stand_ins import StandIns, traced

STATE_VAR = "sparkguard_state"
INTERPRETER = "/usr/bin/python3"  # where the site's first task installs python3 when a node lacks it


# ---------------------------------------------------------------- validate: ours -> Ansible's


def staged_check(check: str, path: str, owner: str | None = None, group: str | None = None,
                 mode: str | None = None) -> str:
    """sparkguard's ``validate`` (a shell command on ``{path}``, the staged copy) as a script over ``$1``.

    Ansible validates its own temporary file (called ``source`` or ``tmpXXXX``); our commands need the
    live file's name (``systemd-analyze verify`` reads the unit type from it) and its owner and mode. So
    ``$1`` is staged exactly as apply stages it (``DIR/.sparkguard-stage/NAME``; an edit takes the live
    file's owner and mode) and the command runs on that, with apply's message when it fails. site.yml
    hands the script to ``sh`` base64-encoded (ansible_play.VALIDATE): Ansible splits ``validate`` into
    words without a shell and expands $VARS in them, which would change a shell command.
    """
    directory, name = os.path.split(path)
    stage_dir = os.path.join(directory, STAGE_DIR)
    if owner is None:
        ownership = ('chown --reference="$sparkguard_live" "$sparkguard_staged" &&\n'
                     '  chmod --reference="$sparkguard_live" "$sparkguard_staged"')
    else:
        ownership = (f'chown {shlex.quote(f"{owner}:{group}")} "$sparkguard_staged" &&\n'
                     f'  chmod {shlex.quote(mode or "0644")} "$sparkguard_staged"')
    staged_command = check.replace("{path}", '"$sparkguard_staged"')
    # One short line per step (the paths are named once, as variables): host_vars stays readable and lint-clean.
    return (
        f"sparkguard_live={shlex.quote(path)}\n"
        f"sparkguard_dir={shlex.quote(stage_dir)}\n"
        f"sparkguard_staged={shlex.quote(os.path.join(stage_dir, name))}\n"
        'mkdir -p -m 0700 "$sparkguard_dir" && cp "$1" "$sparkguard_staged" &&\n'
        f'  {ownership} ||\n'
        '  { rm -rf "$sparkguard_dir"; exit 1; }\n'
        f"{staged_command} ||\n"
        f"  {{ echo {shlex.quote(f'sparkguard: validation failed for {path}; the live file was not touched')} >&2;\n"
        '    rm -rf "$sparkguard_dir"; exit 1; }\n'
        'rm -rf "$sparkguard_dir"\n'
    )


# ---------------------------------------------------------------- one host's data


def _validate(check: str | None, **where: Any) -> dict[str, str]:
    return {"validate": staged_check(check, **where)} if check else {}


def _file(state: DesiredState, managed: ManagedFile, stand_ins: StandIns) -> dict[str, Any]:
    parts = stand_ins.parts(managed.content)
    return {
        "role": state.role, "path": managed.path, "mode": managed.mode, "owner": managed.owner,
        "group": managed.group, "secret": managed.secret, "daemon_reload": managed.is_systemd_unit,
        **({"parts": parts} if parts is not None else {"content": managed.content}),
        **_validate(managed.validate, path=managed.path, owner=managed.owner, group=managed.group, mode=managed.mode),
    }


def _edit(state: DesiredState, edit: FileEdit) -> dict[str, Any]:
    return {"role": state.role, "path": edit.path, "description": edit.description, "regexp": edit.regexp,
            "replace": edit.replace, "daemon_reload": edit.generator_input,
            **_validate(edit.validate, path=edit.path)}


def _absent(state: DesiredState) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """What must go: globs (never the role's own files) and instances of unit templates (never ``keep``)."""
    own = sorted({f.path for f in state.files})
    files = [{"role": state.role, "description": a.description, "globs": list(a.globs), "keep": own}
             for a in state.absent_files]
    instances = []
    for gone in state.absent_instances:
        prefix, _, suffix = gone.template.partition("{}")
        instances.append({
            "role": state.role, "description": gone.description, "pattern": f"{prefix}*{suffix}",
            "regexp": f"^{re.escape(prefix)}(.+){re.escape(suffix)}$", "keep": list(gone.keep),
            # [before, after] the instance name, as str.format fills each template's {}.
            "units": [_around(t) for t in (gone.template, *gone.companions)],
            "files": [_around(f) for f in gone.files],
        })
    return files, instances


def _around(template: str) -> list[str]:
    """``a@{}.service`` -> ``["a@", ".service"]``: what goes before and after the instance name."""
    before, _, after = template.format("\0").partition("\0")
    return [before, after]


def _service(state: DesiredState, service: Service) -> dict[str, Any]:
    return {"role": state.role, "name": service.name, "running": service.running, "enabled": service.enabled,
            "restart_on": list(service.restart_on), "reload_on": list(service.reload_on)}


def state_data(states: list[DesiredState], stand_ins: StandIns) -> dict[str, Any]:
    """Every role's state as one set of lists, one per kind, in registry order (what site.yml loops over)."""
    data: dict[str, list[Any]] = {key: [] for key in (
        "packages", "files_before_packages", "directories", "files", "edits", "absent_files", "absent_instances",
        "masks", "sysctls", "services", "ensures")}
    for state in states:
        data["packages"] += [{"role": state.role, "name": p} for p in state.packages]
        data["files_before_packages"] += [_file(state, m, stand_ins) for m in state.files if m.before_packages]
        data["files"] += [_file(state, m, stand_ins) for m in state.files if not m.before_packages]
        data["directories"] += [{"role": state.role, "path": d.path, "mode": d.mode, "owner": d.owner,
                                 "group": d.group} for d in state.directories]
        data["edits"] += [_edit(state, e) for e in state.edits]
        absent_files, absent_instances = _absent(state)
        data["absent_files"] += absent_files
        data["absent_instances"] += absent_instances
        data["masks"] += [{"role": state.role, "name": s.name, "masked": s.masked}
                          for s in state.services if s.masked is not None]
        data["sysctls"] += [{"role": state.role, "key": k, "value": v} for k, v in sorted(state.sysctls.items())]
        data["services"] += [_service(state, s) for s in state.services]
        data["ensures"] += [{"role": state.role, "description": e.description, "check": e.check, "fix": e.fix}
                            for e in state.ensures]
    # Each secret a file needs, under the role whose file it is: `--tags ROLE` checks only what ROLE reads.
    used = [{"role": f["role"], **part} for f in data["files_before_packages"] + data["files"]
            for part in f.get("parts", []) if isinstance(part, dict)]
    return {**data, "secrets": [dict(pair) for pair in dict.fromkeys(tuple(u.items()) for u in used)]}


def host_data(entry: InventoryHost) -> tuple[dict[str, Any], list[Problem]]:
    """One host's desired state as data, built without reading a secret, and why it cannot be exported (if so)."""
    (states, stand_ins), refused = traced(entry)
    return state_data(states, stand_ins), refused


# ---------------------------------------------------------------- YAML


class _Unsafe(dict[str, Any]):
    """A mapping written with Ansible's ``!unsafe`` tag: every string in it is data, never a template."""


class _Dumper(yaml.SafeDumper):  # type: ignore[misc]  # PyYAML ships no stubs: SafeDumper is Any
    """Readable output: multi-line text as literal blocks where YAML keeps it exact, order as built, and a
    list indented under its key (as yamllint and ansible-lint expect)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)

    def write_double_quoted(self, text: str, split: bool = True) -> None:
        """A double-quoted scalar folded to the width wherever needed, mid-word included: an escaped line
        break joins the lines with nothing between (YAML 1.2, 7.3.1), so a long regex or path folds
        losslessly (PyYAML folds only at spaces and escapes, and leaves such a line past the linters' 160)."""
        self.write_indicator('"', True)
        for index, char in enumerate(text):
            piece = _escaped(char, self.ESCAPE_REPLACEMENTS)
            if split and index > 0 and (self.column + len(piece) > self.best_width
                                        or (char == " " and self.column > self.best_width - 30)):
                self.stream.write("\\")
                self.write_indent()
                self.whitespace = self.indention = False
                if char == " ":
                    piece = "\\ "  # leading blanks of a continuation line are dropped unless escaped
            self.stream.write(piece)
            self.column += len(piece)
        self.write_indicator('"', False)


def _escaped(char: str, replacements: dict[str, str]) -> str:
    """``char`` as it stands in a double-quoted YAML scalar: itself when printable, else an escape."""
    # \u2028, \u2029 and \ufeff are printable but a reader would take them as a line break or a BOM.
    printable = char == " " or ("\x21" <= char <= "\x7e" and char not in '"\\') or (
        ("\xa0" <= char <= "\ud7ff" or "\ue000" <= char <= "\ufffd") and char not in "\u2028\u2029\ufeff")
    if printable:
        return char
    if char in replacements:
        return "\\" + replacements[char]
    code = ord(char)
    return f"\\x{code:02X}" if code <= 0xFF else f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}"


# A line longer than this (with its indent) would be past the linters' 160 in a literal block or a plain
# scalar: such text is written double-quoted instead, folded losslessly by _Dumper.write_double_quoted.
LITERAL_MAX = 140


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # \x85, \u2028 and \u2029 are line breaks to a YAML reader: written as they are, they would come back as
    # \n or a space; only a double-quoted scalar escapes them.
    if any(c in value for c in "\x85\u2028\u2029"):
        style: str | None = '"'
    elif max(map(len, value.split("\n"))) > LITERAL_MAX:
        style = '"'
    else:
        style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _represent_unsafe(dumper: yaml.SafeDumper, value: _Unsafe) -> yaml.MappingNode:
    return dumper.represent_mapping("!unsafe", dict(value))


_Dumper.add_representer(str, _represent_str)
_Dumper.add_representer(_Unsafe, _represent_unsafe)


def dump(document: Any) -> str:
    text: str = yaml.dump(document, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True,
                          width=120)
    return text


def _comment(lines: list[str]) -> str:
    return "".join(f"# {line}\n" if line else "#\n" for line in lines)


def offline_choices(entry: InventoryHost) -> list[str]:
    """Where a role chooses on the live node ('auto' settings, Role.live_alternatives) and the export, offline,
    chose as render does: in the role's own words (Role.describe). Apply may choose otherwise on that node."""
    return [f"{role.name}: " + "; ".join(role.describe(entry.config, None).values())
            for role in registry.roles()
            if role.enabled(entry.config) and role.describe is not None and role.live_alternatives is not None
            and role.live_alternatives(entry.config)]


def host_vars_text(entry: InventoryHost, data: dict[str, Any]) -> str:
    choices = offline_choices(entry)
    header = _comment([
        f"{entry.name}: its sparkguard desired state, generated by sparkguard {__version__} (render --format ansible).",
        "Data only: tagged !unsafe, so Ansible never templates a file's {{ }}. site.yml loops over these lists.",
        "Secrets are not here: a file that needs one names the environment variable or file the controller",
        "looks it up from (parts: ... {env: NAME} / {file: PATH}).",
        *(["Chosen without seeing the node (declare the setting to choose yourself):", *choices] if choices else []),
    ])
    return header + "---\n" + dump({STATE_VAR: _Unsafe(data)})


# ---------------------------------------------------------------- inventory.yml, ansible.cfg


def connection_vars(entry: InventoryHost) -> dict[str, Any]:
    """The host's connection settings in Ansible's words (the reverse of ansible_compat.ALIASES)."""
    cfg = entry.config
    ssh_options = [f"-o StrictHostKeyChecking={cfg.ssh_host_key_checking}"]
    # A path written with ~ stays so: whoever runs the playbook reads their own home, not the exporter's.
    known_hosts = entry.home_relative.get("ssh_known_hosts_file", cfg.ssh_known_hosts_file)
    key = entry.home_relative.get("ssh_key", cfg.ssh_key)
    if known_hosts:
        ssh_options.append(f"-o UserKnownHostsFile={shlex.quote(known_hosts)}")  # ssh itself expands a ~
    return {
        "ansible_host": cfg.ssh_host, "ansible_port": cfg.ssh_port, "ansible_user": cfg.ssh_user,
        "ansible_become": cfg.sudo,
        **({"ansible_ssh_private_key_file": key} if key else {}),
        "ansible_ssh_common_args": " ".join(ssh_options),
    }


def inventory_text(entries: list[InventoryHost]) -> str:
    # The inventory's groups, each with every host in it (nested ones flattened): `--limit GROUP` picks what
    # `sparkguard apply --limit GROUP` picks.
    groups: dict[str, dict[str, None]] = {}
    for entry in entries:
        for group in entry.groups:
            if group not in ("all", "ungrouped"):
                groups.setdefault(group, {})[entry.name] = None
    document: dict[str, Any] = {"all": {"vars": {"ansible_python_interpreter": INTERPRETER},
                                        "hosts": {e.name: _Unsafe(connection_vars(e)) for e in entries}}}
    if groups:
        document["all"]["children"] = {group: {"hosts": members} for group, members in sorted(groups.items())}
    return _comment([f"Generated by sparkguard {__version__} from the sparkguard inventory: how to reach each host.",
                     "Host keys are checked as the inventory says (ssh_host_key_checking, ssh_known_hosts_file)."]
                    ) + "---\n" + dump(document)


def ansible_cfg(hosts: int) -> str:
    return (f"# Generated by sparkguard {__version__}. Ansible reads this file from the current directory:\n"
            f"# run ansible-playbook from here, or set ANSIBLE_CONFIG to this file.\n"
            f"[defaults]\ninventory = inventory.yml\nforks = {max(hosts, 1)}\ngathering = explicit\n"
            f"# Each host's ssh args say yes or accept-new (inventory.yml); Ansible must not turn checking off.\n"
            f"host_key_checking = True\nretry_files_enabled = False\ninterpreter_python = {INTERPRETER}\n\n"
            f"[connection]\npipelining = True\n")


# ---------------------------------------------------------------- writing OUT


FILES_DIR = "files"
# The linters' settings the export is clean under (tests/unit/test_ansible_lint.py runs both on it).
YAMLLINT = """\
# Generated by sparkguard: yamllint's settings for this export (yamllint .). files/ holds the nodes' own
# files, byte for byte as apply writes them (Prometheus' YAML has its own style): not linted as the play.
---
extends: default
ignore: |
  files/
rules:
  line-length: {max: 160}
  comments: {min-spaces-from-content: 1}
  comments-indentation: false
  braces: {max-spaces-inside: 1}
  octal-values: {forbid-implicit-octal: true, forbid-explicit-octal: true}
"""
ANSIBLE_LINT = """\
# Generated by sparkguard: ansible-lint's settings for this export (ansible-lint).
---
profile: production
exclude_paths:
  - files/
"""


def role_tasks_text() -> str:
    return _comment([f"Generated by sparkguard {__version__}: one role's kinds, included by site.yml once per role",
                     "(sg_role), over that role's items in host_vars."]) + "---\n" + dump(role_tasks())


def site_text() -> str:
    requires = {role.name: [r.name for r in registry.with_requirements(role.name)] for role in registry.roles()}
    return _comment(header(__version__)) + "---\n" + dump(plays(__version__, requires))


def _target(root: Path, relative: str) -> Path:
    """``root/relative``, refused outside ``root`` and where a link or a non-file stands (sparkguard.safe_write)."""
    target = path_inside(root, root / relative, "", relative)
    safe_write.check(target)
    return target


def contents_as_files(host: str, data: dict[str, Any]) -> dict[str, str]:
    """Move each file's content out of ``data`` into ``files/HOST/PATH`` (returned: relative path -> text).

    The play copies it from there byte for byte (``copy src`` never templates). A reviewer diffs real
    files, and host_vars keeps only short lines. A file built from secret lookups keeps its parts.
    """
    moved = {}
    for key in ("files_before_packages", "files"):
        for item in data[key]:
            if "content" in item:
                relative = f"{FILES_DIR}/{host}{item['path']}"
                moved[relative] = item.pop("content")
                item["src"] = relative
    return moved


def export_inventory(inventory: Inventory, out: Path) -> list[Path]:
    """Write the playbook, inventory, config, every host's data and files under ``out``; return the paths (sorted).

    Nothing is written before every host's data is built: a refused secret leaves OUT as it was. A host
    data file of a host no longer in the inventory is removed (Ansible would ignore it; a reader would not),
    and ``files/`` is written afresh.
    """
    entries = sorted(inventory.hosts, key=lambda h: h.name)
    built = {entry.name: host_data(entry) for entry in entries}
    refused = [problem for _, found in built.values() for problem in found]
    if refused:
        raise ConfigError(refused)
    data = {name: host for name, (host, _) in built.items()}
    root = safe_write.output_directory(out)
    texts = {"site.yml": site_text(), ROLE_TASKS: role_tasks_text(), "inventory.yml": inventory_text(entries),
             "ansible.cfg": ansible_cfg(len(entries)), ".yamllint": YAMLLINT, ".ansible-lint": ANSIBLE_LINT}
    for entry in entries:
        texts |= contents_as_files(entry.name, data[entry.name])
    texts |= {f"host_vars/{e.name}.yml": host_vars_text(e, data[e.name]) for e in entries}
    targets = {relative: _target(root, relative) for relative in texts}  # every refusal before any write
    for directory in ("host_vars", "tasks", FILES_DIR):
        safe_write.check_directory(root / directory)  # a link or a file there is refused, never followed
    host_vars = root / "host_vars"
    if host_vars.is_dir():
        for stale in sorted(set(host_vars.glob("*.yml")) - set(targets.values())):
            safe_write.remove(stale)
    safe_write.remove_tree(root / FILES_DIR)
    for relative, target in targets.items():
        safe_write.write(target, texts[relative], root=root)
    return sorted(targets.values())


__all__ = ["staged_check", "export_inventory", "host_data", "StandIns", "STATE_VAR"]
