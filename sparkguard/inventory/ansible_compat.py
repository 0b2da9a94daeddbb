"""Ansible inventories as sparkguard reads them: connection aliases, host ranges, `ansible-inventory --list`.

Teams already keep their fleet in Ansible form. Rather than depend on ansible-core at run time, sparkguard
reads what `ansible-inventory -i ANYTHING --list` prints (which already resolved INI files, ranges, vaults
and dynamic inventories) and the plain YAML form, and translates it into its own layout, so the same
validation, precedence and error paragraphs apply. Nothing is dropped quietly: an Ansible key with no
sparkguard meaning stays in place and the schema refuses it by name.
"""

from __future__ import annotations

import itertools
import re
import string
from collections.abc import Callable
from typing import Any

# Ansible's connection variables and the sparkguard setting each one is.
ALIASES = {
    "ansible_host": "ssh_host",
    "ansible_ssh_host": "ssh_host",
    "ansible_port": "ssh_port",
    "ansible_ssh_port": "ssh_port",
    "ansible_user": "ssh_user",
    "ansible_ssh_user": "ssh_user",
    "ansible_become": "sudo",
    "ansible_ssh_private_key_file": "ssh_key",
}
# Ansible keys that only tell Ansible how to run its own modules: sparkguard runs none on the node (its
# probe and operations are shell over SSH), so they are accepted, dropped, and named in a note. A key
# mapped to a tuple is ignored only with one of those values; another value would change how the node is
# reached or who runs things there, so the schema refuses it by name as before.
IGNORED: dict[str, tuple[str, ...] | None] = {
    "ansible_python_interpreter": None,       # which Python runs Ansible's modules
    "ansible_pipelining": None,               # how Ansible ships its modules
    "ansible_ssh_pipelining": None,
    "ansible_shell_type": ("sh",),
    "ansible_shell_executable": ("/bin/sh", "/bin/bash", "/usr/bin/bash"),
    "ansible_connection": ("ssh", "smart", "paramiko"),  # sparkguard always uses SSH
    "ansible_become_method": ("sudo",),       # sparkguard's sudo: true is sudo
    "ansible_become_user": ("root",),
}
# A range expands to at most this many hosts: `node-[0:99999999]` is a typo or an attack, not a fleet.
MAX_RANGE_HOSTS = 4096
_RANGE = re.compile(r"\[([0-9a-zA-Z]+):([0-9a-zA-Z]+)(?::([0-9]+))?\]")
MAX_GROUP_DEPTH = 32


class AnsibleFormError(ValueError):
    """The Ansible form could not be read; the message says what and what is allowed."""


def ignorable(key: Any, value: Any) -> bool:
    """Whether an Ansible key may be dropped: it only concerns Ansible's own modules (IGNORED).

    >>> ignorable("ansible_python_interpreter", "/usr/bin/python3"), ignorable("ansible_connection", "local")
    (True, False)
    """
    if not isinstance(key, str) or key not in IGNORED:
        return False
    values = IGNORED[key]
    return values is None or str(value).strip().lower() in values


def translate_aliases(layer: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, Any, str]]]:
    """A vars layer with Ansible's connection keys renamed; conflicts as (key, value, why).
    Keys that only concern Ansible's own modules are left for the loader to drop (``ignorable``).

    >>> translate_aliases({"ansible_host": "10.0.0.5", "ansible_become": "true", "earlyoom": {}})[0]
    {'ssh_host': '10.0.0.5', 'sudo': 'true', 'earlyoom': {}}
    >>> translate_aliases({"ansible_port": 22, "ssh_port": 2222})[1]
    [('ssh_port', 2222, "sets ssh_port, as 'ansible_port' in the same place does (22): keep one")]
    """
    translated: dict[str, Any] = {}
    origin: dict[str, str] = {}
    conflicts = []
    for key, value in layer.items():
        target = ALIASES.get(key, key) if isinstance(key, str) else key
        if target in translated and translated[target] != value:
            conflicts.append((key, value, f"sets {target}, as {origin[target]!r} in the same place does "
                                          f"({translated[target]!r}): keep one"))
            continue
        translated[target] = value
        origin[target] = key
    return translated, conflicts


def _shown(name: str) -> str:
    """A name as an error paragraph quotes it: at most 80 characters (a host key can be a megabyte long)."""
    return name if len(name) <= 80 else f"{name[:60]}...({len(name)} characters)"


def _range_parts(match: re.Match[str], name: str) -> tuple[int, Callable[[], list[str]]]:
    """One ``[start:end(:step)]`` as (how many names it makes, a function that makes them), nothing built yet."""
    start, end, step_text = match.groups()
    if step_text and len(step_text) > 18:
        raise AnsibleFormError(f"the range step in '{_shown(name)}' is longer than 18 digits")
    step = int(step_text) if step_text else 1
    if step < 1:
        raise AnsibleFormError(f"the range step must be at least 1 in '{_shown(name)}'")
    if start.isdigit() and end.isdigit():
        if len(start) > 18 or len(end) > 18:
            raise AnsibleFormError(f"the range in '{_shown(name)}' has a bound longer than 18 digits")
        width = len(start) if start.startswith("0") and len(start) > 1 else 0
        first, last = int(start), int(end)
        if last < first:
            raise AnsibleFormError(f"the range in '{_shown(name)}' ends before it starts")
        return (last - first) // step + 1, lambda: [str(n).zfill(width) for n in range(first, last + 1, step)]
    if len(start) == 1 and len(end) == 1 and start in string.ascii_letters and end in string.ascii_letters:
        if ord(end) < ord(start):
            raise AnsibleFormError(f"the range in '{_shown(name)}' ends before it starts")
        return (ord(end) - ord(start)) // step + 1, lambda: [chr(c) for c in range(ord(start), ord(end) + 1, step)]
    raise AnsibleFormError(f"'{_shown(name)}' is not a host range: use [01:10] (numbers) or [a:f] (one letter each)")


def count_host_range(name: str) -> int:
    """How many hosts ``name`` expands to, counted without building one (the product of its ranges' sizes).

    >>> count_host_range("h[0:4095]x[0:4095]")
    16777216
    """
    count = 1
    for match in _RANGE.finditer(name):
        count *= _range_parts(match, name)[0]
    return count


def expand_host_range(name: str, limit: int = MAX_RANGE_HOSTS) -> list[str]:
    """``spark-[01:03]`` -> spark-01, spark-02, spark-03, as Ansible expands it (also ``[a:c]`` and ``[0:10:2]``).

    The names are counted first (the product of every range's size) and built only within ``limit``:
    ``h[0:4095]x[0:4095]`` is 16.7 million names, refused before any is made.

    >>> expand_host_range("spark-[01:03]")
    ['spark-01', 'spark-02', 'spark-03']
    >>> expand_host_range("rack[a:b]-gpu[1:2]")
    ['racka-gpu1', 'racka-gpu2', 'rackb-gpu1', 'rackb-gpu2']
    >>> expand_host_range("plain")
    ['plain']
    """
    matches = list(_RANGE.finditer(name))
    if not matches:
        return [name]
    parsed = [_range_parts(match, name) for match in matches]
    count = 1
    for size, _ in parsed:
        count *= size
    if count > limit:
        sizes = f" ({' x '.join(str(size) for size, _ in parsed)})" if len(parsed) > 1 else ""
        raise AnsibleFormError(f"the range{'s' if len(parsed) > 1 else ''} in '{_shown(name)}' "
                               f"name{'' if len(parsed) > 1 else 's'} {count} hosts{sizes}, more than the {limit} "
                               f"a range may name (counted, not built); split it, or list the hosts")
    pieces: list[list[str]] = []
    position = 0
    for match, (_, build) in zip(matches, parsed, strict=True):
        pieces += [[name[position:match.start()]], build()]
        position = match.end()
    pieces.append([name[position:]])
    return ["".join(parts) for parts in itertools.product(*pieces)]


def is_inventory_list(document: Any) -> bool:
    """True for the JSON of ``ansible-inventory --list`` (``_meta``, or groups whose children are lists)."""
    if not isinstance(document, dict):
        return False
    top = document.get("all")
    return "_meta" in document or (isinstance(top, dict) and isinstance(top.get("children"), list))


def from_inventory_list(document: dict[str, Any]) -> dict[str, Any]:
    """``ansible-inventory --list`` (with or without ``--export``) as sparkguard's ``all:`` document.

    Groups keep their vars, hosts get their ``_meta.hostvars`` (the whole merged set without ``--export``:
    the same values, at host precedence). A host without ``ansible_host`` is reached by its name, as in Ansible.

    Each group is built once and the same mapping is placed under every parent that names it (the loader
    walks a mapping once too): 30 levels of two groups that share their children are 60 groups, not 2**30
    paths. A group that is its own ancestor, or a chain of groups deeper than MAX_GROUP_DEPTH, is refused
    with the chain of names.
    """
    meta = document.get("_meta") or {}
    if not isinstance(meta, dict) or not isinstance(meta.get("hostvars") or {}, dict):
        raise AnsibleFormError("_meta.hostvars must be a mapping of host name: vars")
    hostvars: dict[str, Any] = meta.get("hostvars") or {}
    placed: set[str] = set()
    built: dict[str, dict[str, Any]] = {}
    height: dict[str, int] = {}  # the longest chain of groups from this one down, itself included
    building: list[str] = []  # the chain being built, from `all`

    def chain(*more: str) -> str:
        return " > ".join([*building, *more])

    def group(name: str) -> dict[str, Any]:
        if name in building:
            raise AnsibleFormError(f"group '{_shown(name)}' is its own ancestor ({chain(name)}): a group cannot "
                                   f"contain itself (Ansible refuses it too); remove one of these children")
        if len(building) >= MAX_GROUP_DEPTH:
            raise AnsibleFormError(f"groups nest deeper than {MAX_GROUP_DEPTH} levels ({chain(name)}): not an "
                                   f"inventory sparkguard reads")
        body = document.get(name) or {}
        if not isinstance(body, dict):
            raise AnsibleFormError(f"group '{_shown(name)}' must be a mapping with hosts, vars and children")
        unknown = set(body) - {"hosts", "vars", "children"}
        if unknown:
            raise AnsibleFormError(f"group '{_shown(name)}' has keys {sorted(unknown)[:5]}; allowed: hosts, vars, "
                                   f"children")
        out: dict[str, Any] = {}
        if body.get("vars"):
            out["vars"] = body["vars"]
        hosts = body.get("hosts") or []
        children = body.get("children") or []
        if not isinstance(hosts, list) or not isinstance(children, list):
            raise AnsibleFormError(f"group '{_shown(name)}': hosts and children must be lists of names")
        if hosts:
            out["hosts"] = {}
            for host in hosts:
                if not isinstance(host, str):
                    raise AnsibleFormError(f"group '{_shown(name)}' lists a host that is not a name: {host!r:.80}")
                out["hosts"][host] = _host_vars(host, hostvars) if host not in placed else None
                placed.add(host)
        building.append(name)
        below = 0
        if children:
            out["children"] = {}
            for child in children:
                if not isinstance(child, str):
                    continue
                if child in building:
                    group(child)  # raises, naming the loop
                if child not in built:
                    out["children"][child] = group(child)
                elif len(building) + height[child] > MAX_GROUP_DEPTH:
                    raise AnsibleFormError(f"groups nest deeper than {MAX_GROUP_DEPTH} levels ({chain(child)} and "
                                           f"{height[child] - 1} more below): not an inventory sparkguard reads")
                else:
                    out["children"][child] = built[child]
                below = max(below, height[child])
        building.pop()
        built[name] = out
        height[name] = below + 1
        return out

    converted = group("all")
    for name in hostvars:
        if name not in placed:  # listed in _meta only: it belongs to `all`, as in Ansible
            converted.setdefault("hosts", {})[name] = _host_vars(name, hostvars)
    return {"all": converted}


def _host_vars(host: str, hostvars: dict[str, Any]) -> dict[str, Any]:
    values = hostvars.get(host) or {}
    if not isinstance(values, dict):
        raise AnsibleFormError(f"_meta.hostvars of '{host}' must be a mapping")
    values = dict(values)
    if not any(key in values for key in ("ssh_host", "ansible_host", "ansible_ssh_host")):
        values["ssh_host"] = host
    return values
