"""Ansible-like YAML inventory: groups, hosts and vars, validated before any SSH.

Layout of an inventory directory::

    hosts.yml             all: {vars: {...}, hosts: {...}, children: {GROUP: {...}}}
                          (or the JSON of `ansible-inventory --list`, which brings INI and dynamic inventories)
    group_vars/GROUP.yml  optional, overrides the group's inline vars (.yaml, .json and GROUP/*.yml too)
    host_vars/HOST.yml    optional, overrides the host's inline vars (likewise)
    inventory.py          the adapter that lets plain `pyinfra` read this directory

Ansible's forms are read as Ansible reads them (sparkguard.inventory.ansible_compat): host ranges
(`spark-[01:03]`) and the connection keys `ansible_host/_port/_user/_become/_ssh_private_key_file`.
A vars file nobody reads is an error, never silence. Groups are a graph by name, as in Ansible (a group
under two parents is in both), each read once; a group loop is an error.

Reading is bounded before the work is done (issue 27): a range is counted before it is built, and the hosts,
host entries, group memberships and merged values have limits (MAX_* below), each refused as one paragraph
naming the file. A symbolic link that loops or leads nowhere in group_vars/host_vars is named, never followed.

Precedence, low to high: role defaults < all < groups (parents before children,
siblings by name) < host. Mappings merge key by key, so a group can set
``earlyoom.term_percent`` and a host ``earlyoom.kill_percent``; lists and
scalars replace.
"""

from __future__ import annotations

import difflib
import os
import re
import typing
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from .. import registry
from ..errors import MISSING, ConfigError, Problem
from ..hostconfig import ConnectionSettings, HostConfig, host_config_model
from ..settings import url_credential_problems
from . import operator_files
from .ansible_compat import (
    MAX_RANGE_HOSTS,
    AnsibleFormError,
    count_host_range,
    expand_host_range,
    from_inventory_list,
    ignorable,
    is_inventory_list,
    translate_aliases,
)

GROUP_KEYS = ("hosts", "vars", "children")
HOSTS_FILE = "hosts.yml"
VARS_SUFFIXES = (".yml", ".yaml", ".json")  # what Ansible's host_group_vars plugin reads


@dataclass
class InventoryHost:
    name: str
    groups: tuple[str, ...]
    config: HostConfig
    sources: dict[str, str] = field(repr=False, default_factory=dict)
    home_relative: dict[str, str] = field(repr=False, default_factory=dict)  # connection paths written with ~

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
    # Ansible keys accepted and dropped (ansible_compat.IGNORED), per host: validate and apply say so.
    ignored: dict[str, list[str]] = field(default_factory=dict)

    def notes(self) -> list[str]:
        """What the loader accepted without using, one line per kind, for the operator."""
        by_key: dict[str, list[str]] = {}
        for host, keys in self.ignored.items():
            for key in keys:
                by_key.setdefault(key, []).append(host)
        return [f"{key} is ignored (it tells Ansible how to run its modules; sparkguard runs none on the node) "
                f"on {', '.join(hosts[:5])}{f' and {len(hosts) - 5} more' if len(hosts) > 5 else ''}"
                for key, hosts in sorted(by_key.items())]

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
    """The file as UTF-8 text, or a ConfigError that says what it is instead (never a traceback, never its content).

    Read through sparkguard.inventory.operator_files, as every file on the operator's machine: a regular file only, never
    under /proc, /sys or /dev (a vars file linked to /proc/self/environ is refused, not read), at most 1 MiB."""
    try:
        data = operator_files.read_bytes(path, MAX_FILE_BYTES)
    except operator_files.Refused as refused:
        raise _refuse(display, f"{refused.reason}: not an inventory file") from None
    if data is None:
        raise _refuse(display, "cannot be read (it is gone, or this user may not read it)")
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


# What a YAML error may quote of the file: a character, a tag, a key. Quoted text longer than this is left out.
_QUOTED = re.compile(r"'[^']{4,}'|\"[^\"]{4,}\"")


def _yaml_problem(exc: yaml.YAMLError, outside: bool) -> str:
    """What went wrong, in PyYAML's words but never a line of the file: str(exc) quotes the line (its snippet),
    so only the problem is kept, with longer quoted text cut; of a file outside the inventory, nothing at all."""
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = getattr(exc, "problem", None)
    if outside:
        return f"is not valid YAML{where} (a file outside the inventory: nothing of it is shown)"
    if not isinstance(problem, str) or problem.startswith("duplicate key"):  # ours: names the key, not a value
        return f"is not valid YAML{where}" + (f": {problem}" if isinstance(problem, str) else "")
    return f"is not valid YAML{where}: {_QUOTED.sub('<...>', problem)}"


_INI_SECTION = re.compile(r"^\[[A-Za-z0-9_.:-]+\]\s*(?:[#;].*)?$")
_INI_HOST_LINE = re.compile(r"^[A-Za-z0-9_.\[\]:-]+(?:\s+[A-Za-z_][A-Za-z0-9_]*=\S*)+\s*$")
INI_HINT = ("this looks like an Ansible INI inventory ([group] sections, host key=value lines); sparkguard reads "
            "YAML: convert it with `ansible-inventory -i FILE --list > hosts.yml` (the JSON it prints is YAML, "
            "groups, vars and ranges resolved) and give sparkguard that file's directory")


def looks_like_ini(text: str) -> bool:
    """An Ansible INI inventory: a ``[group]`` section line and a ``host key=value`` line or another section.

    >>> looks_like_ini("[spark]\\nspark-01 ansible_host=10.0.0.5\\n"), looks_like_ini("all:\\n  hosts: {}\\n")
    (True, False)
    """
    lines = [line.strip() for line in text.splitlines()[:2000] if line.strip() and not line.lstrip().startswith(("#", ";"))]
    sections = sum(1 for line in lines if _INI_SECTION.match(line))
    return sections >= 1 and (sections >= 2 or any(_INI_HOST_LINE.match(line) for line in lines))


def _read_yaml(path: Path, display: str, outside: bool = False) -> Any:
    """The parsed file. ``outside``: the file lies outside the inventory directory (a symlink out of it): an
    error names it, and shows nothing it holds. An INI inventory is named as one, with the way to convert it."""
    text = _read_text(path, display)
    if not outside and looks_like_ini(text):
        raise _refuse(display, INI_HINT)
    try:
        _check_events(text, display)
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise _refuse(display, _yaml_problem(exc, outside)) from None
    except (ValueError, RecursionError, TypeError) as exc:  # e.g. an integer of 5000 digits
        detail = type(exc).__name__ if outside or isinstance(exc, TypeError) else str(exc)[:200]
        raise _refuse(display, f"cannot be read as an inventory: {detail}") from None


def _deep_merge(target: dict[str, Any], layer: dict[str, Any], label: str, sources: dict[str, str], prefix: str = "",
                owned: set[int] | None = None) -> None:
    """Merge ``layer`` into ``target`` (a host's own dict), recording where each dotted key came from.

    Values are shared with the layer, never copied: a layer is read by every host of its group, and a copy per
    host is hosts x size (a 300 KB list under 4096 hosts is gigabytes). Nothing changes a layer: a mapping is
    copied (shallowly, once) only when a later layer merges into it; ``owned`` holds the ids of those copies.
    """
    owned = {id(target)} if owned is None else owned
    for key, value in layer.items():
        dotted = f"{prefix}{key}"
        current = target.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            if id(current) not in owned:
                current = target[key] = dict(current)
                owned.add(id(current))
            _deep_merge(current, value, label, sources, dotted + ".", owned)
        else:
            target[key] = value
            _forget(current, dotted, sources)  # the keys under what it replaces: by its keys, not a scan of all
            _record(value, label, sources, dotted)


def _forget(replaced: Any, dotted: str, sources: dict[str, str]) -> None:
    if isinstance(replaced, dict):
        for key, sub in replaced.items():
            path = f"{dotted}.{key}"
            sources.pop(path, None)
            _forget(sub, path, sources)


def _record(value: Any, label: str, sources: dict[str, str], dotted: str) -> None:
    sources[dotted] = label
    if isinstance(value, dict):
        for key, sub in value.items():
            _record(sub, label, sources, f"{dotted}.{key}")


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


# An inventory names at most MAX_HOSTS hosts, and its host entries (each host once per group that lists it,
# ranges counted) and group memberships (each host once per group it is in, through its parents) stay under
# MAX_MEMBERSHIPS: bounds on the memory and time of reading a pull request's inventory, far above a real
# fleet, each refused as one paragraph that names the file and the limit.
MAX_HOSTS = 4096
MAX_MEMBERSHIPS = 1 << 18
# The values merged for all hosts together (every mapping key and list item of every layer a host reads, once
# per host): what validating costs, refused before it is spent. A real host reads a few hundred.
MAX_MERGED_VALUES = 1 << 21


class _Loader:
    """Walks hosts.yml and the *_vars directories, keeping where each value came from.

    Groups form a graph by name, as in Ansible: a group named under two parents (or defined twice) is one
    group, in both. Each group mapping is walked once, whatever number of parents share it, and the groups
    of each host are worked out once from that graph (ancestors per group, then per host), so the work is
    the size of the file, never the number of paths through it.
    """

    def __init__(self, hosts_file: Path):
        self.hosts_file = hosts_file
        self.root = hosts_file.parent
        self.display = _display(hosts_file)
        # The inventory directory as named (load_inventory sets it; a hosts.yml linked out of it is outside), and
        # the labels of the files read from outside it: no error shows a value that came from one.
        self.inside = Path(os.path.realpath(self.root))
        self.outside: set[str] = set()
        self.problems: list[Problem] = []
        self.group_layers: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        self.group_depth: dict[str, int] = {}
        self.group_parents: dict[str, dict[str, None]] = {}  # ordered sets: first seen first
        self.host_direct: dict[str, dict[str, None]] = {}  # the groups that list each host, in order
        self.host_groups: dict[str, list[str]] = {}
        self.host_inline: dict[str, dict[str, Any]] = {}
        self.group_members: dict[str, list[str]] = {}
        self.group_files_read: set[str] = set()
        self._walked: dict[int, Any] = {}  # id -> the mapping itself (kept, so that no id is reused)
        self._entries = 0
        self._merged_values = 0
        self._sizes: dict[int, int] = {}
        self.stopped = False  # a limit or a group loop: one paragraph, nothing more is read
        self.ignored: dict[str, list[str]] = {}  # host -> Ansible keys dropped (ansible_compat.IGNORED)

    def load(self) -> None:
        if not _within(self.hosts_file, self.inside):
            self.outside.add(self.display)
        document = _read_yaml(self.hosts_file, self.display, self.display in self.outside)
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
        self._walk_group("all", top, None)
        if not self.stopped:
            self._memberships()
        if not self.stopped:
            self._count_values()
        if not self.stopped:
            self._unknown_vars_files()

    def _count_values(self) -> None:
        """The values each host would merge from its groups and inline vars, before any is merged (host_vars
        files are added as layers_for reads them)."""
        per_group = {group: sum(_size(layer, self._sizes) for _, layer in layers)
                     for group, layers in self.group_layers.items()}
        for host, groups in self.host_groups.items():
            self._merged_values += sum(per_group.get(group, 0) for group in groups)
            self._merged_values += _size(self.host_inline.get(host) or {}, self._sizes)
            if self._merged_values > MAX_MERGED_VALUES:
                self._stop("vars", MISSING, _too_many_values(host))
                return

    def _stop(self, path: str, value: Any, allowed: str) -> None:
        self._problem("", path, value, allowed)
        self.stopped = True
        self.host_groups.clear()  # no host is read further: the limit's paragraph is the answer

    def _unknown_vars_files(self) -> None:
        """A vars file no group or host reads is a typo or a wrong layout: say so instead of ignoring it."""
        for folder, known, what in (("group_vars", self.group_layers, "group"), ("host_vars", self.host_groups, "host")):
            directory = self.root / folder
            if _link_to_nothing(directory):
                self._problem("", folder, folder, _LINK_TO_NOTHING, _display(directory))
                continue
            if not directory.is_dir():
                continue
            for entry in _listing(directory):
                if entry.name.startswith("."):
                    continue  # .gitkeep and friends
                if _link_to_nothing(entry):
                    self._problem("", folder, entry.name, _LINK_TO_NOTHING, _display(entry))
                    continue
                if entry.is_dir():
                    name: str | None = entry.name
                    for inner in _listing(entry):
                        if inner.name.startswith("."):
                            continue
                        if _link_to_nothing(inner):
                            self._problem("", folder, f"{entry.name}/{inner.name}", _LINK_TO_NOTHING, _display(inner))
                        elif not (inner.is_file() and inner.suffix in VARS_SUFFIXES):
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
        """A group's or host's vars files, as Ansible reads them: NAME.yml, .yaml, .json, then NAME/*.{yml,yaml,json} sorted.

        A link that loops or leads nowhere is not read here: _unknown_vars_files names it."""
        directory = self.root / folder
        paths = [directory / f"{name}{suffix}" for suffix in VARS_SUFFIXES]
        if (directory / name).is_dir():
            paths += sorted(p for p in _listing(directory / name) if p.suffix in VARS_SUFFIXES and not p.name.startswith("."))
        layers = []
        for path in paths:
            if not path.is_file():
                continue
            label = _display(path)
            if not _within(path, self.inside):
                self.outside.add(label)
            data = _read_yaml(path, label, label in self.outside) or {}
            if isinstance(data, dict):
                layers.append((label, data))
            else:  # what it is, never what it holds
                self._problem(host, "", f"a YAML {type(data).__name__}", f"a {folder} file must be a mapping", label)
        return layers

    def _problem(self, host: str, path: str, value: Any, allowed: str, source: str | None = None) -> None:
        self.problems.append(Problem(host, path, value, allowed, source or self.display))

    def _walk_group(self, name: str, body: Any, parent: str | None) -> None:
        reason = name_problem(name)
        if reason:
            self._problem("", "group", name[:80] if isinstance(name, str) else name, reason)
            return
        if body is None:
            body = {}
        if not isinstance(body, dict):
            self._problem("", f"group {name}", body, "a group must be a mapping with keys hosts, vars, children")
            return
        parents = self.group_parents.setdefault(name, {})
        if parent is not None:
            parents[parent] = None
        if id(body) in self._walked:
            return  # the same mapping under another parent (ansible-inventory --list): its contents are read once
        self._walked[id(body)] = body
        for key in body:
            if key not in GROUP_KEYS:
                hint = _did_you_mean(key, GROUP_KEYS)
                self._problem("", f"group {name}.{key}", body[key],
                              f"unknown group key{hint}; allowed: {', '.join(GROUP_KEYS)}")
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
            if host not in self.host_direct and len(self.host_direct) >= MAX_HOSTS:
                self._stop(f"group {name}.hosts", host, f"the inventory names more than {MAX_HOSTS} hosts: more than "
                           f"sparkguard reads from one inventory; split the fleet into inventories")
                return
            self.host_direct.setdefault(host, {})[name] = None
            if host_vars is None:
                host_vars = {}
            if not isinstance(host_vars, dict):
                self._problem(host, "", host_vars, "host vars must be a mapping of setting: value")
                continue
            merged = self.host_inline.setdefault(host, {})
            merged.update(host_vars)
        if self.stopped:
            return

        children = body.get("children") or {}
        if not isinstance(children, dict):
            self._problem("", f"group {name}.children", children, "children must be a mapping of group name: group")
            return
        for child, child_body in children.items():
            self._walk_group(child if isinstance(child, str) else repr(child), child_body, name)
            if self.stopped:
                return

    def _expand_ranges(self, group: str, hosts: dict[Any, Any]) -> list[tuple[Any, Any]]:
        """Host entries with Ansible ranges (``spark-[01:03]``) expanded; each shares the entry's vars (never changed).

        A range is counted before it is built, against its own limit and the inventory's host entries."""
        expanded: list[tuple[Any, Any]] = []
        for host, host_vars in hosts.items():
            ranged = isinstance(host, str) and "[" in host
            try:
                count = count_host_range(host) if ranged else 1
                if count > MAX_RANGE_HOSTS:
                    expand_host_range(host)  # refuses, counting only: nothing is built
            except AnsibleFormError as error:
                self._problem("", f"group {group}.hosts", host[:80], str(error))
                continue
            if self._entries + count > MAX_MEMBERSHIPS:
                self._stop(f"group {group}.hosts", host[:80] if isinstance(host, str) else host,
                           f"the inventory lists more than {MAX_MEMBERSHIPS} host entries (each host once for every "
                           f"group that lists it, ranges counted before they are built): more than sparkguard reads "
                           f"from one inventory")
                break
            self._entries += count
            if not ranged:
                expanded.append((host, host_vars))
                continue
            try:
                expanded.extend((name, host_vars) for name in expand_host_range(host))
            except AnsibleFormError as error:
                self._problem("", f"group {group}.hosts", host[:80], str(error))
        return expanded

    def _memberships(self) -> None:
        """Each group's depth and ancestors, then each host's groups, from the graph of names (once each)."""
        children: dict[str, list[str]] = {group: [] for group in self.group_parents}
        waiting = {group: len(parents) for group, parents in self.group_parents.items()}
        for group, parents in self.group_parents.items():
            for parent in parents:
                children[parent].append(group)
        order = [group for group, count in waiting.items() if count == 0]
        for group in order:  # grows as it goes: parents before children (Kahn)
            for child in children[group]:
                waiting[child] -= 1
                if waiting[child] == 0:
                    order.append(child)
        if len(order) < len(waiting):
            loop = self._loop({group for group, count in waiting.items() if count})
            self._stop("group children", " > ".join(loop),
                       f"a group loop: group '{loop[0]}' is its own ancestor; a group cannot contain itself "
                       f"(Ansible refuses it too): remove one of these children")
            return
        ancestors: dict[str, dict[str, None]] = {}
        work = 0
        for group in order:
            found: dict[str, None] = {}
            depth = 0
            for parent in self.group_parents[group]:
                work += len(ancestors[parent]) + 1
                found.update(ancestors[parent])
                found[parent] = None
                depth = max(depth, self.group_depth[parent] + 1)
            if work > MAX_MEMBERSHIPS:
                self._stop("group children", group, f"the groups' ancestors add up to more than {MAX_MEMBERSHIPS} "
                           f"(each group once for every group above it): more than sparkguard reads from one inventory")
                return
            ancestors[group] = found
            self.group_depth[group] = depth
        members: dict[str, list[str]] = {group: [] for group in order}
        for host, direct in self.host_direct.items():
            groups: dict[str, None] = {}
            for group in direct:
                work += len(ancestors[group]) + 1
                groups.update(ancestors[group])
                groups[group] = None
            if work > MAX_MEMBERSHIPS:
                self._stop("hosts", host, f"the hosts' group memberships (each host once for every group it is in, "
                           f"through its parents) add up to more than {MAX_MEMBERSHIPS}: more than sparkguard reads "
                           f"from one inventory")
                return
            self.host_groups[host] = list(groups)
            for group in groups:
                members[group].append(host)
        self.group_members = {group: hosts for group, hosts in members.items() if hosts}

    def _loop(self, stuck: set[str]) -> list[str]:
        """One loop among the groups left over by the topological sort, from a group back to itself."""
        path = [min(stuck)]
        while True:
            parent = next(p for p in self.group_parents[path[-1]] if p in stuck)
            if parent in path:
                loop = path[path.index(parent):] + [parent]
                return loop[::-1]
            path.append(parent)

    def layers_for(self, host: str) -> list[tuple[str, dict[str, Any]]]:
        groups = sorted(self.host_groups.get(host, ["all"]), key=lambda g: (self.group_depth.get(g, 0), g))
        layers: list[tuple[str, dict[str, Any]]] = []
        for group in groups:
            layers.extend(self.group_layers.get(group, []))
        if self.host_inline.get(host):
            layers.append((f"{self.display} (host {host})", self.host_inline[host]))
        files = self._vars_layers("host_vars", host, host)
        layers.extend(files)
        self._merged_values += sum(_size(layer, self._sizes) for _, layer in files)  # the rest: counted in load
        if self._merged_values > MAX_MERGED_VALUES:
            raise ConfigError([Problem("", "vars", MISSING, _too_many_values(host), self.display)])
        translated = []
        for label, layer in layers:
            dropped = [key for key, value in layer.items() if ignorable(key, value)]
            if dropped:
                self.ignored.setdefault(host, [])
                self.ignored[host] += [key for key in dropped if key not in self.ignored[host]]
                layer = {key: value for key, value in layer.items() if key not in dropped}
            renamed, conflicts = translate_aliases(layer)
            for key, value, why in conflicts:
                self._problem(host, str(key), value, why, label)
            translated.append((label, renamed))
        return translated


def _too_many_values(host: str) -> str:
    return (f"the hosts' settings add up to more than {MAX_MERGED_VALUES} values (every key and list item of each "
            f"host's vars, from every group it is in, counted once per host; passed at host '{host}'): more than "
            f"sparkguard reads from one inventory (a real host has a few hundred)")


def _size(value: Any, sizes: dict[int, int]) -> int:
    """How many values ``value`` holds (itself, and every key's value and list item below it), counted once per
    object: a layer shared by many hosts is walked once."""
    if not isinstance(value, (dict, list)):
        return 1
    known = sizes.get(id(value))
    if known is None:
        known = sizes[id(value)] = 1 + sum(_size(sub, sizes) for sub in (value.values() if isinstance(value, dict)
                                                                       else value))
    return known


_LINK_TO_NOTHING = ("is a symbolic link that loops or leads nowhere: sparkguard does not follow it; remove it, "
                    "or point it at a vars file or directory")


def _link_to_nothing(path: Path) -> bool:
    """A symbolic link whose target cannot be reached (a loop, a missing target): never followed."""
    return path.is_symlink() and not os.path.exists(path)


def _listing(directory: Path) -> list[Path]:
    """A vars directory's entries, sorted; an unreadable one reads as empty (its own read names the problem)."""
    try:
        return sorted(directory.iterdir())
    except OSError:
        return []


def _within(path: Path, directory: Path) -> bool:
    """Whether ``path``, its symlinks followed, lies in ``directory`` (a real path)."""
    return Path(os.path.realpath(path)).is_relative_to(directory)


def _inventory_dir(path: str | Path) -> Path:
    """The real path of the inventory directory as the operator named it (not where a linked hosts.yml leads)."""
    named = Path(path)
    return Path(os.path.realpath(named if named.is_dir() else named.parent))


WITHHELD = "<not shown: read from a file outside the inventory>"


def _withhold_outside(problem: Problem, outside: set[str], sources: dict[str, str]) -> Problem:
    """``problem`` without its value when that value (or part of it) came from a file outside the inventory."""
    if problem.value is MISSING or not outside:
        return problem
    field = re.sub(r"\[\d+\]", "", problem.field)
    labels = {problem.source, _source_for(field, sources)} | {
        label for key, label in sources.items() if field and key.startswith(field + ".")}
    if not any(label == o or label.startswith(o + " (") for label in labels if label for o in outside):
        return problem
    return Problem(problem.host, problem.field, WITHHELD, problem.allowed, problem.source)


def _display(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except (RuntimeError, OSError):  # a symbolic link loop (RuntimeError before Python 3.13): shown as written
        try:
            return str(Path(os.path.abspath(path)).relative_to(Path.cwd()))
        except (ValueError, OSError):
            return str(path)
    except ValueError:
        return str(path)


def _did_you_mean(key: str | int, allowed: Any) -> str:
    close = difflib.get_close_matches(str(key), [str(a) for a in allowed], n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _container_item(annotation: Any) -> Any:
    """The model a ``dict[str, Model]`` or ``list[Model]`` setting holds (its keys or indexes are names), else None."""
    origin = typing.get_origin(annotation)
    if origin in (dict, list, tuple):
        args = typing.get_args(annotation)
        item = args[-1] if args else None
        if isinstance(item, type) and issubclass(item, BaseModel):
            return item
    return None


def _model_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> tuple[type[BaseModel] | None, Any]:
    """Return (the model that owns loc[-1], its FieldInfo or None).

    A key of a ``dict[str, Model]`` (``vllm.models.<name>``) or an index of a list of models is a
    step into the item's model, so a typo inside one is suggested like any other.
    """
    current: Any = model
    parts = list(loc[:-1])
    while parts:
        part = parts.pop(0)
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None, None
        info = current.model_fields.get(str(part))
        if info is None:
            return None, None
        current = info.annotation
        item = _container_item(current)
        if item is not None and parts:
            parts.pop(0)  # the item's name or index
            current = item
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
        from ..settings import SECRET_PLACEHOLDER, is_secret

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
            from ..settings import KIND_LABELS

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


def _resolve_paths(values: dict[str, Any], root: Path) -> dict[str, str]:
    """Connection paths made absolute for this machine; returns the ``~`` forms as written (the Ansible export
    keeps them, so whoever runs the playbook reads their own home, not the exporter's)."""
    written = {}
    for key in ("ssh_key", "ssh_known_hosts_file"):
        value = values.get(key)
        if isinstance(value, str) and value and not value.startswith(("/", "~")) and "\0" not in value:
            values[key] = os.path.realpath(root / value)  # never raises: a link loop stays as written
        elif isinstance(value, str) and value.startswith("~"):
            written[key] = value
            values[key] = str(Path(value).expanduser())
    return written


def load_inventory(path: str | Path, *, check_roles: bool = True) -> Inventory:
    """Load, merge and validate; raise ConfigError listing every problem found."""
    hosts_file = locate(path)
    loader = _Loader(hosts_file)
    loader.inside = _inventory_dir(path)
    loader.load()
    if not loader.host_groups and not loader.problems:
        loader._problem("", "hosts", MISSING, "the inventory defines no hosts")
    model = host_config_model()
    hosts: list[InventoryHost] = []
    problems = list(loader.problems)
    host_sources: dict[str, dict[str, str]] = {}
    for name in loader.host_groups:
        merged: dict[str, Any] = {}
        sources = host_sources[name] = {}
        for label, layer in loader.layers_for(name):
            _deep_merge(merged, layer, label, sources)
        home_relative = _resolve_paths(merged, hosts_file.parent)
        default_source = f"{loader.display} (host {name})"
        if "ssh_host" not in merged:
            # As Ansible reaches a host without ansible_host: by its name (DNS, /etc/hosts or ~/.ssh/config).
            merged["ssh_host"] = name
            sources["ssh_host"] = f"{default_source}: no ssh_host or ansible_host, so the host's name"
        try:
            config = model.model_validate(merged)
        except ValidationError as exc:
            problems.extend(problems_from_validation(name, exc, model, sources, default_source))
            continue
        # Every file the settings name on the operator's machine, read as render and apply would read it; and
        # no credentials in any URL. On every command (validate, render, the export, plan, apply) alike.
        problems.extend(Problem(p.host, p.field, p.value, p.allowed,
                                _source_for(re.sub(r"\[\d+\]", "", p.field), sources) or default_source)
                        for p in [*operator_files.problems(name, config), *url_credential_problems(name, config)])
        if check_roles:
            problems.extend(role_problems(name, config, sources, default_source))
        hosts.append(InventoryHost(name, tuple(loader.host_groups[name]), config, sources, home_relative))
    problems.extend(p for p in loader.problems if p not in problems)
    if problems:
        raise ConfigError(_unique([_withhold_outside(p, loader.outside, host_sources.get(p.host, {}))
                                   for p in problems]))
    groups = {g: list(members) for g, members in loader.group_members.items()}
    return Inventory(path=hosts_file.parent, hosts=hosts, groups=groups, ignored=loader.ignored)


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
            problems.append(replace(problem, host=host, source=source))
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
