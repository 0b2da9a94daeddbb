"""Ansible-like YAML inventory: groups, hosts and vars, validated before any SSH.

Layout of an inventory directory::

    hosts.yml             all: {vars: {...}, hosts: {...}, children: {GROUP: {...}}}
                          (or the JSON of `ansible-inventory --list`, which brings INI and dynamic inventories)
    group_vars/GROUP.yml  optional, overrides the group's inline vars (.yaml, .json and GROUP/*.yml too)
    host_vars/HOST.yml    optional, overrides the host's inline vars (likewise)
    inventory.py          the adapter that lets plain `pyinfra` read this directory

Ansible's forms are read as Ansible reads them (sparkguard.ansible_compat): host ranges
(`spark-[01:03]`) and the connection keys `ansible_host/_port/_user/_become/_ssh_private_key_file`.
A vars file nobody reads is an error, never silence.

Precedence, low to high: role defaults < all < groups (parents before children,
siblings by name) < host. Mappings merge key by key, so a group can set
``earlyoom.term_percent`` and a host ``earlyoom.kill_percent``; lists and
scalars replace.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from . import registry
from .ansible_compat import AnsibleFormError, expand_host_range, from_inventory_list, is_inventory_list, translate_aliases
from .errors import MISSING, ConfigError, Problem
from .hostconfig import ConnectionSettings, HostConfig, host_config_model

GROUP_KEYS = ("hosts", "vars", "children")
HOSTS_FILE = "hosts.yml"
VARS_SUFFIXES = (".yml", ".yaml", ".json")  # what Ansible's host_group_vars plugin reads


@dataclass
class InventoryHost:
    name: str
    groups: tuple[str, ...]
    config: HostConfig
    sources: dict[str, str] = field(repr=False, default_factory=dict)

    def pyinfra_data(self) -> dict[str, Any]:
        """Host data in pyinfra's vocabulary, plus the validated settings."""
        cfg = self.config
        data: dict[str, Any] = {
            "ssh_hostname": cfg.ssh_host,
            "ssh_port": cfg.ssh_port,
            "ssh_user": cfg.ssh_user,
            "ssh_strict_host_key_checking": cfg.ssh_host_key_checking,
            "ssh_connect_retries": 0,
            "sparkguard": cfg.model_dump(mode="json"),
        }
        if cfg.ssh_key:
            data["ssh_key"] = cfg.ssh_key
        if cfg.ssh_known_hosts_file:
            data["ssh_known_hosts_file"] = cfg.ssh_known_hosts_file
        if cfg.sudo:
            data["_sudo"] = True
        return data


@dataclass
class Inventory:
    path: Path
    hosts: list[InventoryHost]
    groups: dict[str, list[str]]

    def host(self, name: str) -> InventoryHost:
        for entry in self.hosts:
            if entry.name == name:
                return entry
        raise KeyError(name)


def locate(path: str | Path) -> Path:
    """Accept the directory, its hosts.yml, or its inventory.py adapter."""
    candidate = Path(path)
    if candidate.is_dir():
        candidate = candidate / HOSTS_FILE
    elif candidate.suffix == ".py":
        candidate = candidate.parent / HOSTS_FILE
    if not candidate.is_file():
        raise ConfigError(
            [Problem("", "", str(path), f"no inventory found: expected a directory with {HOSTS_FILE}, "
                     f"its {HOSTS_FILE}, or its inventory.py adapter")]
        )
    return candidate.resolve()


class _StrictLoader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no stubs: SafeLoader is Any
    """SafeLoader that refuses duplicate keys: YAML keeps the last one silently, so a second
    ``earlyoom:`` block further down a file would quietly throw the first one away."""


def _no_duplicates(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first at line {seen[key] + 1}); merge the two blocks",
                key_node.start_mark)
        seen[key] = key_node.start_mark.line
    mapping: dict[Any, Any] = loader.construct_mapping(node, deep=deep)
    return mapping


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


MAX_FILE_BYTES = 1 << 20
MAX_DEPTH = 32


def _refuse(display: str, allowed: str) -> ConfigError:
    return ConfigError([Problem("", "", MISSING, allowed, source=display)])


def _read_text(path: Path, display: str) -> str:
    """The file as UTF-8 text, or a ConfigError that says what it is instead (never a traceback)."""
    try:
        if not path.is_file():
            raise _refuse(display, "is not a regular file")
        with path.open("rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError as error:
        raise _refuse(display, f"cannot be read: {error.strerror or error}") from None
    if len(data) > MAX_FILE_BYTES:
        raise _refuse(display, f"is larger than {MAX_FILE_BYTES // 1024} KiB: not an inventory file")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in data:
        raise _refuse(display, "is not UTF-8 text (UTF-16 or binary?): save it as UTF-8")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _refuse(display, f"is not UTF-8 text (byte {error.start}): save it as UTF-8") from None


def _check_events(text: str, display: str) -> None:
    """Refuse aliases (a billion-laughs file expands to gigabytes) and absurd nesting, before loading."""
    depth = 0
    for event in yaml.parse(text, Loader=_StrictLoader):
        if isinstance(event, yaml.AliasEvent):
            mark = event.start_mark
            raise _refuse(display, f"uses a YAML alias (*{event.anchor}) at line {mark.line + 1}: anchors and aliases "
                                   f"are not supported in inventories; write the values out, or put shared ones in "
                                   f"group vars")
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_DEPTH:
                raise _refuse(display, f"nests deeper than {MAX_DEPTH} levels at line {event.start_mark.line + 1}: "
                                       f"not an inventory")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1


def _read_yaml(path: Path, display: str) -> Any:
    text = _read_text(path, display)
    try:
        _check_events(text, display)
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise _refuse(display, f"is not valid YAML{where}: {problem}") from None
    except (ValueError, RecursionError, TypeError) as exc:  # e.g. an integer of 5000 digits
        raise _refuse(display, f"cannot be read as an inventory: {str(exc)[:200]}") from None


def _deep_merge(target: dict[str, Any], layer: dict[str, Any], label: str, sources: dict[str, str], prefix: str = "") -> None:
    for key, value in layer.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _deep_merge(target[key], value, label, sources, dotted + ".")
        else:
            target[key] = _copy(value)
            for existing in [p for p in sources if p.startswith(dotted + ".")]:
                del sources[existing]
            _record(value, label, sources, dotted)


def _record(value: Any, label: str, sources: dict[str, str], dotted: str) -> None:
    sources[dotted] = label
    if isinstance(value, dict):
        for key, sub in value.items():
            _record(sub, label, sources, f"{dotted}.{key}")


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


# Host and group names become directory names (render's OUT/<host>, host_vars/<host>.yml): nothing that
# could climb out of a directory, start an option, or need quoting.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
NAME_RULE = ("letters, digits, '.', '_' and '-', starting with a letter or digit, at most 63 characters "
             "(no '/', no '..', no leading '-')")


def name_problem(name: Any) -> str | None:
    """Why a host or group name is refused, or None."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name) or ".." in name:
        return f"not a valid name: {NAME_RULE}"
    return None


class _Loader:
    """Walks hosts.yml and the *_vars directories, keeping where each value came from."""

    def __init__(self, hosts_file: Path):
        self.hosts_file = hosts_file
        self.root = hosts_file.parent
        self.display = _display(hosts_file)
        self.problems: list[Problem] = []
        self.group_layers: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        self.group_depth: dict[str, int] = {}
        self.host_groups: dict[str, list[str]] = {}
        self.host_inline: dict[str, dict[str, Any]] = {}
        self.group_members: dict[str, list[str]] = {}
        self.group_files_read: set[str] = set()

    def load(self) -> None:
        document = _read_yaml(self.hosts_file, self.display)
        if document is None:
            document = {}
        if not isinstance(document, dict):
            self._problem("", "", type(document).__name__, "the top level must be a mapping of groups, e.g. `all:`")
            return
        if is_inventory_list(document):
            try:
                document = from_inventory_list(document)
            except AnsibleFormError as error:
                self._problem("", "", "ansible-inventory --list output", f"cannot be read: {error}")
                return
        top = document.get("all") or {}
        others = {k: v for k, v in document.items() if k != "all"}
        if others and isinstance(top, dict) and isinstance(top.get("children") or {}, dict):
            # Top-level groups other than `all` are its children, as in Ansible.
            top = dict(top)
            top["children"] = {**(top.get("children") or {}), **others}
        self._walk_group("all", top, depth=0, parents=())
        self._unknown_vars_files()

    def _unknown_vars_files(self) -> None:
        """A vars file no group or host reads is a typo or a wrong layout: say so instead of ignoring it."""
        for folder, known, what in (("group_vars", self.group_layers, "group"), ("host_vars", self.host_groups, "host")):
            directory = self.root / folder
            if not directory.is_dir():
                continue
            for entry in sorted(directory.iterdir()):
                if entry.name.startswith("."):
                    continue  # .gitkeep and friends
                if entry.is_dir():
                    name: str | None = entry.name
                    for inner in sorted(entry.iterdir()):
                        if not inner.name.startswith(".") and not (inner.is_file() and inner.suffix in VARS_SUFFIXES):
                            self._problem("", folder, f"{entry.name}/{inner.name}",
                                          f"only *.yml, *.yaml and *.json files are read in {folder}/<{what}>/: rename or "
                                          f"move it, or it would be silently ignored", _display(inner))
                else:
                    name = entry.name[:-len(entry.suffix)] if entry.is_file() and entry.suffix in VARS_SUFFIXES else None
                if name is not None and name in known:
                    continue
                if name is None:
                    allowed = (f"only {folder}/<{what}>.yml, .yaml, .json or a {folder}/<{what}>/ directory of them is read: "
                               f"rename or move it, or it would be silently ignored")
                else:
                    hint = _did_you_mean(name, list(known))
                    allowed = f"no {what} named '{name}' in {self.display}{hint}: its settings would apply to nothing"
                self._problem("", folder, entry.name, allowed, _display(entry))

    def _vars_layers(self, folder: str, name: str, host: str) -> list[tuple[str, dict[str, Any]]]:
        """A group's or host's vars files, as Ansible reads them: NAME.yml, .yaml, .json, then NAME/*.{yml,yaml,json} sorted."""
        directory = self.root / folder
        paths = [directory / f"{name}{suffix}" for suffix in VARS_SUFFIXES]
        if (directory / name).is_dir():
            paths += sorted(p for p in (directory / name).iterdir() if p.suffix in VARS_SUFFIXES and not p.name.startswith("."))
        layers = []
        for path in paths:
            if not path.is_file():
                continue
            data = _read_yaml(path, _display(path)) or {}
            if isinstance(data, dict):
                layers.append((_display(path), data))
            else:
                self._problem(host, "", data, f"a {folder} file must be a mapping", _display(path))
        return layers

    def _problem(self, host: str, path: str, value: Any, allowed: str, source: str | None = None) -> None:
        self.problems.append(Problem(host, path, value, allowed, source or self.display))

    def _walk_group(self, name: str, body: Any, depth: int, parents: tuple[str, ...]) -> None:
        reason = name_problem(name)
        if reason:
            self._problem("", "group", name[:80] if isinstance(name, str) else name, reason)
            return
        if body is None:
            body = {}
        if not isinstance(body, dict):
            self._problem("", f"group {name}", body, "a group must be a mapping with keys hosts, vars, children")
            return
        for key in body:
            if key not in GROUP_KEYS:
                hint = _did_you_mean(key, GROUP_KEYS)
                self._problem("", f"group {name}.{key}", body[key],
                              f"unknown group key{hint}; allowed: {', '.join(GROUP_KEYS)}")
        lineage = parents + (name,)
        self.group_depth[name] = max(self.group_depth.get(name, 0), depth)
        layers = self.group_layers.setdefault(name, [])
        inline = body.get("vars") or {}
        if not isinstance(inline, dict):
            self._problem("", f"group {name}.vars", inline, "vars must be a mapping of setting: value")
            inline = {}
        if inline:
            layers.append((f"{self.display} (group {name} vars)", inline))
        if name not in self.group_files_read:  # a group listed twice (under two parents) reads its files once
            self.group_files_read.add(name)
            layers.extend(self._vars_layers("group_vars", name, ""))

        hosts = body.get("hosts") or {}
        if isinstance(hosts, list) and all(isinstance(h, str) for h in hosts):
            hosts = {h: None for h in hosts}
        if not isinstance(hosts, dict):
            self._problem("", f"group {name}.hosts", hosts, "hosts must be a mapping of host name: vars")
            hosts = {}
        for host, host_vars in self._expand_ranges(name, hosts):
            reason = name_problem(host)
            if reason:
                self._problem("", "host", host[:80] if isinstance(host, str) else host, reason)
                continue
            for group in lineage:
                groups = self.host_groups.setdefault(host, [])
                if group not in groups:
                    groups.append(group)
                members = self.group_members.setdefault(group, [])
                if host not in members:
                    members.append(host)
            if host_vars is None:
                host_vars = {}
            if not isinstance(host_vars, dict):
                self._problem(host, "", host_vars, "host vars must be a mapping of setting: value")
                continue
            merged = self.host_inline.setdefault(host, {})
            merged.update(host_vars)

        children = body.get("children") or {}
        if not isinstance(children, dict):
            self._problem("", f"group {name}.children", children, "children must be a mapping of group name: group")
            return
        for child, child_body in children.items():
            self._walk_group(child if isinstance(child, str) else repr(child), child_body, depth + 1, lineage)

    def _expand_ranges(self, group: str, hosts: dict[Any, Any]) -> list[tuple[Any, Any]]:
        """Host entries with Ansible ranges (``spark-[01:03]``) expanded; each gets a copy of the entry's vars."""
        expanded: list[tuple[Any, Any]] = []
        for host, host_vars in hosts.items():
            if not isinstance(host, str) or "[" not in host:
                expanded.append((host, host_vars))
                continue
            try:
                expanded.extend((name, _copy(host_vars)) for name in expand_host_range(host))
            except AnsibleFormError as error:
                self._problem("", f"group {group}.hosts", host[:80], str(error))
        return expanded

    def layers_for(self, host: str) -> list[tuple[str, dict[str, Any]]]:
        groups = sorted(self.host_groups.get(host, ["all"]), key=lambda g: (self.group_depth.get(g, 0), g))
        layers: list[tuple[str, dict[str, Any]]] = []
        for group in groups:
            layers.extend(self.group_layers.get(group, []))
        if self.host_inline.get(host):
            layers.append((f"{self.display} (host {host})", self.host_inline[host]))
        layers.extend(self._vars_layers("host_vars", host, host))
        translated = []
        for label, layer in layers:
            renamed, conflicts = translate_aliases(layer)
            for key, value, why in conflicts:
                self._problem(host, str(key), value, why, label)
            translated.append((label, renamed))
        return translated


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _did_you_mean(key: str | int, allowed: Any) -> str:
    close = difflib.get_close_matches(str(key), [str(a) for a in allowed], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _model_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> tuple[type[BaseModel] | None, Any]:
    """Return (the model that owns loc[-1], its FieldInfo or None)."""
    current: Any = model
    for part in loc[:-1]:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None, None
        info = current.model_fields.get(str(part))
        if info is None:
            return None, None
        current = info.annotation
    if isinstance(current, type) and issubclass(current, BaseModel):
        return current, current.model_fields.get(str(loc[-1])) if loc else None
    return None, None


def _describe(info: Any) -> str:
    if info is None:
        return ""
    extra = info.json_schema_extra or {}
    unit = f" [{extra['unit']}]" if isinstance(extra, dict) and extra.get("unit") else ""
    return f" ({info.description}{unit})" if info.description else unit


def problems_from_validation(host: str, error: ValidationError, model: type[BaseModel],
                             sources: dict[str, str], default_source: str) -> list[Problem]:
    problems = []
    for item in error.errors():
        loc = tuple(item["loc"])
        dotted = ".".join(str(p) for p in loc)
        owner, info = _model_at(model, loc)
        source = _source_for(dotted, sources) or default_source
        kind = item["type"]
        from .settings import SECRET_PLACEHOLDER, is_secret

        if is_secret(info):
            item = {**item, "input": SECRET_PLACEHOLDER}
        if kind == "extra_forbidden":
            allowed_keys = sorted(owner.model_fields) if owner else []
            hint = _did_you_mean(loc[-1], allowed_keys)
            allowed = f"unknown setting{hint}; allowed here: {', '.join(allowed_keys)}"
            problems.append(Problem(host, dotted, item["input"], allowed, source))
        elif kind == "missing":
            problems.append(Problem(host, dotted, MISSING, f"is required{_describe(info)}", source))
        elif kind == "string_pattern_mismatch":
            from .settings import KIND_LABELS

            pattern = (item.get("ctx") or {}).get("pattern", "")
            what = KIND_LABELS.get(pattern) or f"a string matching {pattern}"
            problems.append(Problem(host, dotted, item.get("input"), f"not allowed: must be {what}{_describe(info)}",
                                    source))
        else:
            message = item["msg"]
            problems.append(Problem(host, dotted, item.get("input"), f"not allowed: {message}{_describe(info)}", source))
    return problems


def _source_for(dotted: str, sources: dict[str, str]) -> str:
    parts = dotted.split(".")
    while parts:
        label = sources.get(".".join(parts))
        if label:
            return label
        parts.pop()
    return ""


def _resolve_paths(values: dict[str, Any], root: Path) -> None:
    for key in ("ssh_key", "ssh_known_hosts_file"):
        value = values.get(key)
        if isinstance(value, str) and value and not value.startswith(("/", "~")):
            values[key] = str((root / value).resolve())
        elif isinstance(value, str) and value.startswith("~"):
            values[key] = str(Path(value).expanduser())


def load_inventory(path: str | Path, *, check_roles: bool = True) -> Inventory:
    """Load, merge and validate; raise ConfigError listing every problem found."""
    hosts_file = locate(path)
    loader = _Loader(hosts_file)
    loader.load()
    if not loader.host_groups and not loader.problems:
        loader._problem("", "hosts", MISSING, "the inventory defines no hosts")
    model = host_config_model()
    hosts: list[InventoryHost] = []
    problems = list(loader.problems)
    for name in loader.host_groups:
        merged: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for label, layer in loader.layers_for(name):
            _deep_merge(merged, layer, label, sources)
        _resolve_paths(merged, hosts_file.parent)
        default_source = f"{loader.display} (host {name})"
        try:
            config = model.model_validate(merged)
        except ValidationError as exc:
            problems.extend(problems_from_validation(name, exc, model, sources, default_source))
            continue
        if check_roles:
            problems.extend(role_problems(name, config, sources, default_source))
        hosts.append(InventoryHost(name, tuple(loader.host_groups[name]), config, sources))
    problems.extend(p for p in loader.problems if p not in problems)
    if problems:
        raise ConfigError(_unique(problems))
    groups = {g: list(members) for g, members in loader.group_members.items()}
    return Inventory(path=hosts_file.parent, hosts=hosts, groups=groups)


def role_problems(host: str, config: HostConfig, sources: dict[str, str], default_source: str) -> list[Problem]:
    """Cross-field checks each role declares (thresholds in order, budgets that fit)."""
    ROLES = registry.roles()

    problems = []
    by_name = {role.name: role for role in ROLES}
    for role in ROLES:
        if not role.enabled(config):
            continue
        for needed in role.requires:
            if needed in by_name and not by_name[needed].enabled(config):
                field = f"{needed}.enabled"
                problems.append(Problem(host, field, False, f"role {role.name} needs role {needed} ({role.requires_why}); "
                                        f"enable {needed} or set {role.name}.enabled: false",
                                        _source_for(field, sources) or default_source))
        if role.checks is None:
            continue
        for problem in role.checks(config):
            source = problem.source or _source_for(problem.field, sources) or default_source
            problems.append(Problem(host, problem.field, problem.value, problem.allowed, source))
    return problems


def _unique(problems: list[Problem]) -> list[Problem]:
    seen, result = set(), []
    for problem in problems:
        key = problem.paragraph()
        if key not in seen:
            seen.add(key)
            result.append(problem)
    return result


__all__ = ["Inventory", "InventoryHost", "load_inventory", "locate", "ConnectionSettings"]
