"""Ansible inventories as sparkguard reads them: connection aliases, host ranges, `ansible-inventory --list`.

Teams already keep their fleet in Ansible form. Rather than depend on ansible-core at run time, sparkguard
reads what `ansible-inventory -i ANYTHING --list` prints (which already resolved INI files, ranges, vaults
and dynamic inventories) and the plain YAML form, and translates it into its own layout, so the same
validation, precedence and error paragraphs apply. Nothing is dropped quietly: an Ansible key with no
sparkguard meaning stays in place and the schema refuses it by name.
"""

from __future__ import annotations

import re
import string
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
# A range expands to at most this many hosts: `node-[0:99999999]` is a typo or an attack, not a fleet.
MAX_RANGE_HOSTS = 4096
_RANGE = re.compile(r"\[([0-9a-zA-Z]+):([0-9a-zA-Z]+)(?::([0-9]+))?\]")
MAX_GROUP_DEPTH = 32


class AnsibleFormError(ValueError):
    """The Ansible form could not be read; the message says what and what is allowed."""


def translate_aliases(layer: dict[str, Any]) -> tuple[dict[str, Any], list[tuple[str, Any, str]]]:
    """A vars layer with Ansible's connection keys renamed; conflicts as (key, value, why).

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


def expand_host_range(name: str) -> list[str]:
    """``spark-[01:03]`` -> spark-01, spark-02, spark-03, as Ansible expands it (also ``[a:c]`` and ``[0:10:2]``).

    >>> expand_host_range("spark-[01:03]")
    ['spark-01', 'spark-02', 'spark-03']
    >>> expand_host_range("rack[a:b]-gpu[1:2]")
    ['racka-gpu1', 'racka-gpu2', 'rackb-gpu1', 'rackb-gpu2']
    >>> expand_host_range("plain")
    ['plain']
    """
    match = _RANGE.search(name)
    if not match:
        return [name]
    start, end, step_text = match.groups()
    step = int(step_text) if step_text else 1
    if step < 1:
        raise AnsibleFormError(f"the range step must be at least 1 in '{name}'")
    if start.isdigit() and end.isdigit():
        width = len(start) if start.startswith("0") and len(start) > 1 else 0
        if int(end) < int(start):
            raise AnsibleFormError(f"the range in '{name}' ends before it starts")
        if (int(end) - int(start)) // step + 1 > MAX_RANGE_HOSTS:
            raise AnsibleFormError(f"the range in '{name}' names more than {MAX_RANGE_HOSTS} hosts")
        parts = [str(n).zfill(width) for n in range(int(start), int(end) + 1, step)]
    elif len(start) == 1 and len(end) == 1 and start in string.ascii_letters and end in string.ascii_letters:
        if ord(end) < ord(start):
            raise AnsibleFormError(f"the range in '{name}' ends before it starts")
        parts = [chr(c) for c in range(ord(start), ord(end) + 1, step)]
    else:
        raise AnsibleFormError(f"'{name}' is not a host range: use [01:10] (numbers) or [a:f] (one letter each)")
    head, tail = name[:match.start()], name[match.end():]
    expanded = [head + part + rest for part in parts for rest in expand_host_range(tail)]
    if len(expanded) > MAX_RANGE_HOSTS:
        raise AnsibleFormError(f"the ranges in '{name}' name more than {MAX_RANGE_HOSTS} hosts")
    return expanded


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
    """
    meta = document.get("_meta") or {}
    if not isinstance(meta, dict) or not isinstance(meta.get("hostvars") or {}, dict):
        raise AnsibleFormError("_meta.hostvars must be a mapping of host name: vars")
    hostvars: dict[str, Any] = meta.get("hostvars") or {}
    placed: set[str] = set()

    def group(name: str, lineage: tuple[str, ...]) -> dict[str, Any]:
        if name in lineage or len(lineage) > MAX_GROUP_DEPTH:
            raise AnsibleFormError(f"group '{name}' is its own ancestor or nested deeper than {MAX_GROUP_DEPTH}")
        body = document.get(name) or {}
        if not isinstance(body, dict):
            raise AnsibleFormError(f"group '{name}' must be a mapping with hosts, vars and children")
        unknown = set(body) - {"hosts", "vars", "children"}
        if unknown:
            raise AnsibleFormError(f"group '{name}' has keys {sorted(unknown)}; allowed: hosts, vars, children")
        out: dict[str, Any] = {}
        if body.get("vars"):
            out["vars"] = body["vars"]
        hosts = body.get("hosts") or []
        children = body.get("children") or []
        if not isinstance(hosts, list) or not isinstance(children, list):
            raise AnsibleFormError(f"group '{name}': hosts and children must be lists of names")
        if hosts:
            out["hosts"] = {}
            for host in hosts:
                if not isinstance(host, str):
                    raise AnsibleFormError(f"group '{name}' lists a host that is not a name: {host!r}")
                out["hosts"][host] = _host_vars(host, hostvars) if host not in placed else None
                placed.add(host)
        if children:
            out["children"] = {child: group(child, lineage + (name,)) for child in children if isinstance(child, str)}
        return out

    converted = group("all", ())
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
