"""The one static play of the Ansible export (OUT/site.yml): generic tasks over per-host data.

Nothing in it depends on the inventory: every task loops over ``sparkguard_state`` (host_vars), so all
hosts run each task together (forks=N) and the play reads like converge: the same kinds, in the same
order (files marked before_packages, packages, directories, files, edits, what must go, daemon-reload,
masks, sysctls, restarts and reloads, services, ensures), each idempotent, so a second run changes nothing.
Each role's kinds run together with the other roles' (converge goes role by role); within a kind the
roles keep registry order, so a file a later role's validator runs (base's sysctl-check) is there first.

Only ansible-core modules: where it has none (sysctl, sparkguard's Ensure) a fixed ``sh`` script gets
its values as arguments (``argv``, ``expand_argument_vars: false``), never pasted into a command line.
Restarts, reloads and daemon-reload run only when a registered result of a copy, edit or removal changed.
"""

from __future__ import annotations

import re
from typing import Any

from ...state import SYSTEMD_UNIT_DIRS

S = "sparkguard_state"
PYTHON = "/usr/bin/python3"
INSTALLED_PYTHON = "sparkguard: installed python3"
CHANGED = "sparkguard: changed"

NOT_EXPORTED = [
    "What sparkguard apply does and this play does not:",
    "- crash safety: apply records a pending restart on the node before a file goes live and redoes it after a",
    "  killed run; here, as with Ansible's handlers, a run killed between a copy and its restart leaves the",
    "  restart undone (the next run sees no change). Nor are staging leftovers of a killed apply removed.",
    "- the node lock (one apply at a time per node) and apply's one-round-trip snapshot of the node.",
    "- preflight against the live node: declared MemTotal and device profile, each role's checks (earlyoom's",
    "  version, secret values an env file cannot hold). 'auto' settings are resolved offline, as render does.",
    "`sparkguard audit INVENTORY` checks a node this play converged, as it checks one apply converged.",
]

# Run a check; run the fix only when it fails (apply's Ensure); say so on the last line when it did.
ENSURE_SCRIPT = (
    'sparkguard_check=$1 sparkguard_fix=$2\nshift 2\n'
    'if ( eval "$sparkguard_check" ) >/dev/null 2>&1; then exit 0; fi\n'
    'sh -c "$sparkguard_fix" || exit $?\n'
    f"printf '\\n{CHANGED}\\n'\n"
)
# Set a sysctl's live value unless it already is that (whitespace-normalized, as apply compares).
SYSCTL_SCRIPT = (
    "set -f\nsparkguard_words() { printf '%s ' $1; }\n"
    'sparkguard_have=$(sysctl -n "$1") || exit 1\n'
    '[ "$(sparkguard_words "$sparkguard_have")" = "$(sparkguard_words "$2")" ] && exit 0\n'
    'sysctl -q -w "$1=$2" >/dev/null || exit 1\n'
    f"echo '{CHANGED}'\n"
)

# Files and links matching each glob (`*` in the last component), as apply finds them (operations.MatchingFiles).
MATCHING_FILES = (
    'for sparkguard_glob; do\n'
    '  sparkguard_dir=${sparkguard_glob%/*}\n'
    '  find "${sparkguard_dir:-/}" -maxdepth 1 -mindepth 1 -name "${sparkguard_glob##*/}" \\( -type f -o -type l \\) '
    '-print 2>/dev/null\n'
    'done\ntrue\n'
)
# A file's content: its text, or (where it needs a secret) text and lookups on the controller, in order.
CONTENT = (
    "{%- if item.parts is defined -%}{%- for part in item.parts -%}"
    "{%- if part is string -%}{{ part }}"
    "{%- else -%}"
    # read_secret strips a secret file; the file lookup strips its end by default.
    "{%- set secret = lookup('ansible.builtin.env', part.env) if part.env is defined"
    " else lookup('ansible.builtin.file', part.file, lstrip=true) -%}"
    # A secret the role placed as a JSON string (alertmanager.yml's webhook URL).
    "{{ (secret | to_json) if part.json | default(false) else secret }}"
    "{%- endif -%}{%- endfor -%}{%- else -%}{{ item.content }}{%- endif -%}"
)


# Ansible's validate: its temporary file as %s, the staged check (ansible_export.staged_check) base64-encoded
# because Ansible splits validate into words without a shell and expands $VARS in each.
VALIDATE = "/bin/sh -c 'eval \"$(echo {{ item.validate | b64encode }} | base64 -d)\"' sparkguard-validate \"%s\""
VALIDATE_OR_OMIT = "{{ omit if item.validate is not defined else sg_validate }}"


def _results(*registered: str) -> str:
    return " + ".join(f"(({name}.results | default([])) | selectattr('changed', 'defined') | selectattr('changed') "
                      f"| list)" for name in registered)


VARS: dict[str, Any] = {
    "sg_content": CONTENT,
    "sg_validate": VALIDATE,
    "sg_matching_files": MATCHING_FILES,
    "sg_unit_dirs": "^(" + "|".join(re.escape(d) for d in SYSTEMD_UNIT_DIRS) + ")",
    # What changed in this run: the items of the copies and edits that did, and the files removed.
    "sg_changed": f"{{{{ ({_results('sg_files_early', 'sg_files', 'sg_edits')}) | map(attribute='item') | list }}}}",
    "sg_changed_paths": "{{ sg_changed | map(attribute='path') | list }}",
    "sg_removed_paths": f"{{{{ ({_results('sg_absent_removed')}) | map(attribute='path') | list }}}}",
    "sg_container": "{{ (sg_virt.stdout_lines | default([]) | first | default('none') | trim) not in ['', 'none'] }}",
    "sg_first_group": "\\g<1>",
}


def _mine(key: str) -> str:
    """The items of kind ``key`` of the role this included file converges (``sg_role``)."""
    return f"{S}.{key} | selectattr('role', 'equalto', sg_role) | list"


def _loop(key: str, label: str = "{{ item.path }}") -> dict[str, Any]:
    return {"loop": f"{{{{ {_mine(key)} }}}}", "loop_control": {"label": label}}


def _script(script: str, *args: str) -> dict[str, Any]:
    """``sh -c SCRIPT sh ARGS...`` without a shell in between and without Ansible expanding $VARS."""
    return {"argv": ["/bin/sh", "-c", script, "sh", *args], "expand_argument_vars": False}


def _bootstrap() -> list[dict[str, Any]]:
    return [
        {"name": "Python3 for Ansible's modules, installed only where it is absent",
         "ansible.builtin.raw": f"[ -x {PYTHON} ] || {{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive "
                                f"apt-get install -y -qq --no-install-recommends python3 >/dev/null && "
                                f"echo '{INSTALLED_PYTHON}'; }}",
         "register": "sg_python", "changed_when": f"'{INSTALLED_PYTHON}' in sg_python.stdout"},
        {"name": "In a container? (sysctls there are the host kernel's: apply leaves them alone)",
         "ansible.builtin.command": {"argv": ["systemd-detect-virt", "--container"]},
         "register": "sg_virt", "changed_when": False, "failed_when": False},
    ]


def _secrets() -> list[dict[str, Any]]:
    return [
        {"name": "Every secret a file needs is readable on this controller (apply refuses a missing one too)",
         "ansible.builtin.assert": {
             "that": ["(lookup('ansible.builtin.env', item.env) if item.env is defined else lookup('ansible.builtin.file',"
                      " item.file, errors='ignore', lstrip=true)) | default('', true) | length > 0"],
             "fail_msg": "empty or unreadable on this controller: export the environment variable or create the file",
             "quiet": True},
         **_loop("secrets", "{{ item.env | default(item.file) }}")},
    ]


def _files(key: str, title: str, register: str) -> list[dict[str, Any]]:
    """Copies with exact content, validated as apply validates (a staged copy, the live file untouched)."""
    return [
        # As apply: `mkdir -p` where one is missing (the umask's mode); one that exists keeps its own mode and
        # owner (a package's 0750 stays so).
        {"name": f"{title}: their directories, created where missing",
         "ansible.builtin.command": {"argv": ["mkdir", "-p", "--", "{{ item }}"], "creates": "{{ item }}"},
         "loop": f"{{{{ {_mine(key)} | map(attribute='path') | map('dirname') | unique | list }}}}"},
        {"name": title,
         # files/HOST/PATH (ansible_export.contents_as_files), copied byte for byte; or its parts, with lookups.
         "ansible.builtin.copy": {"src": "{{ (playbook_dir ~ '/' ~ item.src) if item.src is defined else omit }}",
                                  "content": "{{ omit if item.src is defined else sg_content }}",
                                  "dest": "{{ item.path }}", "mode": "{{ item.mode }}",
                                  "owner": "{{ item.owner }}", "group": "{{ item.group }}",
                                  "validate": VALIDATE_OR_OMIT},
         **_loop(key), "no_log": "{{ item.secret }}", "register": register},
    ]


def _packages_and_directories() -> list[dict[str, Any]]:
    optional = "{{{{ item.{0} if item.{0} is not none else omit }}}}"
    return [
        {"name": "Packages",
         "ansible.builtin.apt": {"name": f"{{{{ {_mine('packages')} | map(attribute='name') | list }}}}",
                                 "state": "present", "update_cache": True, "cache_valid_time": 3600,
                                 "install_recommends": False},
         "when": f"{_mine('packages')} | length > 0"},
        {"name": "Directories (no mode, owner or group: left to whoever owns it)",
         "ansible.builtin.file": {"path": "{{ item.path }}", "state": "directory",
                                  **{key: optional.format(key) for key in ("mode", "owner", "group")}},
         **_loop("directories")},
    ]


def _edits() -> list[dict[str, Any]]:
    """ansible.builtin.replace with the FileEdit's own regexp and replacement (an absent file stays absent)."""
    return [
        {"name": "Edits of node-owned files: is the file there?", "ansible.builtin.stat": {"path": "{{ item.path }}",
                                                                                          "get_checksum": False},
         **_loop("edits"), "register": "sg_edit_stat"},
        {"name": "Edits of node-owned files",
         "ansible.builtin.replace": {"path": "{{ item.path }}", "regexp": "{{ item.regexp }}",
                                     "replace": "{{ item.replace }}", "validate": VALIDATE_OR_OMIT},
         "loop": f"{{{{ {_mine('edits')} }}}}",
         "loop_control": {"label": "{{ item.path }} ({{ item.description }})", "index_var": "sg_index"},
         "when": "sg_edit_stat.results[sg_index].stat.exists", "register": "sg_edits"},
    ]


GONE = """\
{%- set ns = namespace(out=[]) -%}
{%- for listed in sg_instances.results | default([]) -%}
{%- for name in listed.stdout_lines | map('split') | map('first') | select('match', listed.item.regexp)
      | map('regex_replace', listed.item.regexp, sg_first_group) | reject('in', listed.item.keep) | unique -%}
{%- for around in listed.item[KIND] -%}
{%- set ns.out = ns.out + [around[0] ~ name ~ around[1]] -%}
{%- endfor -%}
{%- endfor -%}
{%- endfor -%}
{{ ns.out }}"""


def _gone(kind: str) -> str:
    """The ``kind`` ('units' or 'files') of every listed instance that must not run, from ``sg_instances``."""
    return GONE.replace("KIND", repr(kind))


def _absent() -> list[dict[str, Any]]:
    """What the state no longer has: files matching its globs (not its own), instances not kept."""
    return [
        {"name": "Files that must go: found", "ansible.builtin.command": {
            "argv": "{{ ['/bin/sh', '-c', sg_matching_files, 'sh'] + item.globs }}", "expand_argument_vars": False},
         **_loop("absent_files", "{{ item.globs | join(' ') }}"), "register": "sg_absent_found",
         "changed_when": False},
        {"name": "Files that must go: removed", "ansible.builtin.file": {"path": "{{ item.1 }}", "state": "absent"},
         "loop": "{{ sg_absent_found.results | default([]) | subelements('stdout_lines') }}",
         "loop_control": {"label": "{{ item.1 }}"}, "when": "item.1 not in item.0.item.keep",
         "register": "sg_absent_removed"},
        {"name": "Unit instances that must not run: listed",
         "ansible.builtin.command": {"argv": ["systemctl", "list-units", "--all", "--plain", "--no-legend",
                                              "{{ item.pattern }}"]},
         **_loop("absent_instances", "{{ item.pattern }}"), "register": "sg_instances", "changed_when": False},
        {"name": "Unit instances that must not run: stopped and disabled (a unit that does not exist is fine)",
         "ansible.builtin.systemd_service": {"name": "{{ item }}", "state": "stopped", "enabled": False},
         "loop": _gone("units"), "register": "sg_stopped",
         "failed_when": "sg_stopped.failed and 'Could not find the requested service' not in sg_stopped.msg | default('')"},
        {"name": "Unit instances that must not run: their files removed",
         "ansible.builtin.file": {"path": "{{ item }}", "state": "absent"}, "loop": _gone("files")},
    ]


def _systemd() -> list[dict[str, Any]]:
    return [
        {"name": "Systemd daemon-reload, only when a unit file, a drop-in or fstab changed or a unit file went",
         "ansible.builtin.systemd_service": {"daemon_reload": True},
         "when": "(sg_changed | selectattr('daemon_reload') | list | length > 0) or "
                 "(sg_removed_paths | select('match', sg_unit_dirs) | list | length > 0)"},
        {"name": "Masks", "ansible.builtin.systemd_service": {"name": "{{ item.name }}", "masked": "{{ item.masked }}"},
         **_loop("masks", "{{ item.name }}")},
        {"name": "Sysctls, live (not in a container)", "ansible.builtin.command": _script(
            SYSCTL_SCRIPT, "{{ item.key }}", "{{ item.value }}"),
         **_loop("sysctls", "{{ item.key }} = {{ item.value }}"), "when": "not sg_container",
         "register": "sg_sysctl", "changed_when": f"sg_sysctl.stdout == '{CHANGED}'"},
    ]


def _services() -> list[dict[str, Any]]:
    """Restart or reload what a changed file calls for (never otherwise), then running/enabled as declared."""
    triggered = [
        {"name": f"Services {state} because a file they read changed",
         "ansible.builtin.systemd_service": {"name": "{{ item.name }}", "state": state},
         **_loop("services", "{{ item.name }}"),
         "when": f"(item.running is true) and (item.{on} | intersect(sg_changed_paths) | length > 0)"}
        for state, on in (("restarted", "restart_on"), ("reloaded", "reload_on"))
    ]
    return triggered + [
        {"name": "Services running or stopped, enabled or not",
         "ansible.builtin.systemd_service": {
             "name": "{{ item.name }}",
             "state": "{{ omit if item.running is none else ('started' if item.running else 'stopped') }}",
             "enabled": "{{ omit if item.enabled is none else item.enabled }}"},
         **_loop("services", "{{ item.name }}"),
         "when": "item.running is not none or item.enabled is not none"},
        {"name": "Ensure: run the fix only where the check fails", "ansible.builtin.command": _script(
            ENSURE_SCRIPT, "{{ item.check }}", "{{ item.fix }}"),
         **_loop("ensures", "{{ item.description }}"), "register": "sg_ensure",
         "changed_when": f"(sg_ensure.stdout_lines | last | default('')) == '{CHANGED}'"},
    ]


ROLE_TASKS = "tasks/role.yml"


def role_tasks() -> list[dict[str, Any]]:
    """OUT/tasks/role.yml: one role's kinds in converge's order, over that role's items (``sg_role``)."""
    return [
        *_secrets(),
        *_files("files_before_packages", "Files a package's first start needs", "sg_files_early"),
        *_packages_and_directories(),
        *_files("files", "Files", "sg_files"),
        *_edits(),
        *_absent(),
        *_systemd(),
        *_services(),
    ]


def header(version: str) -> list[str]:
    return [
        f"Generated by sparkguard {version} (sparkguard render INVENTORY --format ansible --out DIR): the desired",
        "state sparkguard apply converges to, as one Ansible play. Each host's data is host_vars/<host>.yml;",
        "run it from this directory: ansible-playbook site.yml (ansible.cfg names inventory.yml).",
        "One role at a time, as apply goes, each tagged with its name: --tags swap converges swap and what it",
        "needs (base); --skip-tags monitoring leaves monitoring as it is.",
        "",
        *NOT_EXPORTED,
    ]


def _role(name: str, needed_by: list[str]) -> dict[str, Any]:
    """Converge role ``name``: tagged with it and with every role that needs it, so --tags ROLE brings them."""
    tags = [name, *needed_by]
    return {"name": f"Role {name}",
            "ansible.builtin.include_tasks": {"file": ROLE_TASKS, "apply": {"tags": tags}},
            "vars": {"sg_role": name}, "tags": tags}


def plays(version: str, requires: dict[str, list[str]]) -> list[dict[str, Any]]:
    """The play; ``requires``: each role, in apply order, with the roles it needs (itself included)."""
    return [{
        "name": f"Sparkguard {version}: desired state",
        "hosts": "all",
        "gather_facts": False,
        "vars": VARS,
        "tasks": [
            *[{**task, "tags": ["always"]} for task in _bootstrap()],
            *[_role(name, [other for other, needs in requires.items() if name in needs and other != name])
              for name in requires],
        ],
    }]
