"""render --format ansible: the exported data, and the play's own tasks run by real ansible-playbook here.

The data: every string from the states is data to Ansible (!unsafe, checked with Ansible's own loader), a
YAML round trip gives the state back (hostile values included), no secret value is ever written, paths
stay under OUT. The tasks: the copy and replace tasks of the generated site.yml, run on local files,
write exactly what apply writes (file contents with {{ }}, lookups of secrets, the fstab edit on several
texts) and a second run changes nothing; the validators run as apply runs them.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import is_trusted_as_template

from sparkguard import registry
from sparkguard.engine.render import host_states
from sparkguard.errors import ConfigError
from sparkguard.export.ansible.export import (
    STATE_VAR,
    _target,
    _Unsafe,
    contents_as_files,
    dump,
    export_inventory,
    host_data,
    offline_choices,
    role_tasks_text,
    site_text,
    staged_check,
    state_data,
)
from sparkguard.export.ansible.play import CHANGED, ENSURE_SCRIPT, ROLE_TASKS, SYSCTL_SCRIPT
from sparkguard.export.ansible.secret_stand_ins import StandIns
from sparkguard.inventory.loader import load_inventory
from sparkguard.roles.swap.fstab import DISABLE, ENABLE, MARKER
from sparkguard.safe_write import OutputPathError
from sparkguard.state import DesiredState, FileEdit, ManagedFile
from tests.conftest import REPO, run_cli

BIN = Path(sys.executable).parent
USER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name
NODE = "  vars:\n    node: {memory_total_gib: 121.7, device_profile: cpu-only}\n"
# Accepted by base.contact (one line of text): they land in node.json, and must stay data.
HOSTILE = ["{{ lookup('pipe', 'id') }}", "{% raw %}x", "'\"\\ $HOME `id` %s", "line\u2028sep\x85", "ünï €",
           "#{{x}}: [a, b]", "123", "true", "~", "null"]
CONTENTS = HOSTILE + ["", "123\n", "x\r\ny\n", "tab\there\n  trailing  \n", "{{ x }}\n{% if %}\n"]


class _UnsafeLoader(yaml.SafeLoader):
    """PyYAML with Ansible's !unsafe read as the plain value."""


_UnsafeLoader.add_constructor("!unsafe", lambda loader, node: loader.construct_mapping(node, deep=True))


def exported_state(out: Path, host: str) -> dict:
    return yaml.load((out / "host_vars" / f"{host}.yml").read_text(), Loader=_UnsafeLoader)[STATE_VAR]


def one_host(inventory_dir, vars_text: str = "", host_vars: str = "{ssh_host: 192.0.2.1}"):
    path = inventory_dir(f"all:\n{NODE}{vars_text}  hosts:\n    h: {host_vars}\n")
    return load_inventory(path)


# ---------------------------------------------------------------- the data


def test_every_string_from_the_state_is_data_to_ansible_and_round_trips(inventory_dir, tmp_path):
    """Hostile contact strings land in node.json; Ansible's loader (as it reads host_vars) trusts none of them."""
    for value in HOSTILE:
        inventory = one_host(inventory_dir, f"    base: {{contact: {json.dumps(value)}}}\n")
        out = tmp_path / f"out{HOSTILE.index(value)}"
        export_inventory(inventory, out)
        entry = inventory.host("h")
        data, problems = host_data(entry)
        files = {f.path: f.content for s in host_states(entry) for f in s.files}
        assert {f["path"]: f["content"] for f in data["files"]} == files
        moved = contents_as_files("h", data)  # the export's files/h/PATH, copied byte for byte by the play
        assert problems == [] and exported_state(out, "h") == data
        assert {f["path"]: (out / f["src"]).read_bytes().decode() for f in data["files"]} == files
        assert {f["src"]: moved[f["src"]] for f in data["files"]} == {f["src"]: files[f["path"]] for f in data["files"]}
        loaded = DataLoader().load_from_file(str(out / "host_vars" / "h.yml"), trusted_as_template=True)[STATE_VAR]
        assert loaded == data
        strings = list(_strings(loaded))
        assert strings and not any(is_trusted_as_template(s) for s in strings)
        assert value in _strings(json.loads(files["/etc/sparkguard/node.json"]))


@pytest.mark.parametrize("text", CONTENTS + ["\x85\n", "a\u2029\nb\n", "\ufeffbom\n", " lead\n", "x\n\n\n"])
def test_any_text_survives_the_yaml_both_readers_read(tmp_path, text):
    written = tmp_path / "h.yml"
    written.write_text(dump({STATE_VAR: _Unsafe({"content": text})}))
    assert yaml.load(written.read_text(), Loader=_UnsafeLoader)[STATE_VAR]["content"] == text
    assert DataLoader().load_from_file(str(written), trusted_as_template=True)[STATE_VAR]["content"] == text


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def test_connection_settings_become_ansible_inventory(inventory_dir, tmp_path):
    (tmp_path / "keys").mkdir()
    inventory = load_inventory(inventory_dir(
        f"all:\n{NODE}    ssh_user: ops\n    sudo: true\n    ssh_host_key_checking: accept-new\n"
        f"    ssh_known_hosts_file: /srv/known hosts/{{{{x}}}}\n  hosts:\n"
        f"    a: {{ssh_host: 192.0.2.1, ssh_port: 2222, ssh_key: '/k/{{{{ y }}}}'}}\n    b: {{ssh_host: db.example}}\n"))
    out = tmp_path / "out"
    export_inventory(inventory, out)
    listed = subprocess.run([str(BIN / "ansible-inventory"), "-i", str(out / "inventory.yml"), "--list"],
                            capture_output=True, text=True, check=True)
    hostvars = yaml.safe_load(listed.stdout.replace('"__ansible_unsafe": ', '"unsafe": '))["_meta"]["hostvars"]
    unsafe = {k: v["unsafe"] if isinstance(v, dict) else v for k, v in hostvars["a"].items() if k.startswith("ansible_")}
    assert unsafe["ansible_host"] == "192.0.2.1" and unsafe["ansible_port"] == 2222 and unsafe["ansible_user"] == "ops"
    assert unsafe["ansible_become"] is True and unsafe["ansible_ssh_private_key_file"] == "/k/{{ y }}"
    assert unsafe["ansible_ssh_common_args"] == ("-o StrictHostKeyChecking=accept-new "
                                                 "-o UserKnownHostsFile='/srv/known hosts/{{x}}'")
    cfg = (out / "ansible.cfg").read_text()
    assert re.search(r"^forks = 2$", cfg, re.M) and re.search(r"^pipelining = True$", cfg, re.M)
    assert re.search(r"^host_key_checking = True$", cfg, re.M)


def test_groups_survive_the_export_so_limit_group_picks_the_same_hosts(inventory_dir, tmp_path):
    inventory = load_inventory(inventory_dir(
        f"all:\n{NODE}  children:\n    spark:\n      children:\n        rack1:\n          hosts:\n"
        f"            s1: {{ssh_host: 192.0.2.1}}\n      hosts:\n        s2: {{ssh_host: 192.0.2.2}}\n"
        f"  hosts:\n    other: {{ssh_host: 192.0.2.3}}\n"))
    out = tmp_path / "out"
    export_inventory(inventory, out)

    def limited(pattern: str) -> list[str]:
        done = subprocess.run([str(BIN / "ansible-inventory"), "-i", str(out / "inventory.yml"), "--list",
                               "--limit", pattern], capture_output=True, text=True, check=True)
        return sorted(json.loads(done.stdout)["_meta"]["hostvars"])

    assert limited("spark") == ["s1", "s2"] and limited("rack1") == ["s1"] and limited("all") == ["other", "s1", "s2"]


def test_a_path_written_with_a_tilde_stays_one_for_whoever_runs_the_playbook(inventory_dir, tmp_path):
    inventory = load_inventory(inventory_dir(
        f"all:\n{NODE}    ssh_key: ~/.ssh/id_ed25519\n    ssh_known_hosts_file: ~/.ssh/fleet_known_hosts\n"
        f"  hosts:\n    a: {{ssh_host: 192.0.2.1}}\n"))
    assert inventory.hosts[0].config.ssh_key == str(Path.home() / ".ssh/id_ed25519")   # sparkguard itself: expanded
    out = tmp_path / "out"
    export_inventory(inventory, out)
    text = (out / "inventory.yml").read_text()
    assert "~/.ssh/id_ed25519" in text and "~/.ssh/fleet_known_hosts" in text and str(Path.home()) not in text


def test_a_secret_value_is_never_written_and_becomes_a_lookup(inventory_dir, tmp_path, monkeypatch):
    token, key = "hf_tok3n_NEVER_WRITTEN", "k3y-NEVER-WRITTEN"
    monkeypatch.setenv("SG_TEST_TOKEN", token)
    (tmp_path / "api.key").write_text(f"  {key}\n")
    inventory = one_host(inventory_dir, vllm_vars(tmp_path / "api.key"))
    out = tmp_path / "out"
    written = export_inventory(inventory, out)
    assert all(token not in p.read_text() and key not in p.read_text() for p in written)
    data = exported_state(out, "h")
    (env_file,) = [f for f in data["files"] if f["path"].endswith(".env")]
    assert env_file["secret"] and "content" not in env_file
    assert {"env": "SG_TEST_TOKEN"} in env_file["parts"] and {"file": str(tmp_path / "api.key")} in env_file["parts"]
    assert data["secrets"] == [{"role": "vllm", "env": "SG_TEST_TOKEN"}, {"role": "vllm", "file": str(tmp_path / "api.key")}]


def vllm_vars(api_key_file: Path) -> str:
    return ("    vllm:\n      image: vllm/vllm-openai:v0.11.0\n      cuda_total_gib: 100\n      hf_token_env: SG_TEST_TOKEN\n"
            f"      api_key_file: {api_key_file}\n      models:\n"
            "        small: {model: org/small, shape: Llama-3.1-8B, max_model_len: 4096, max_num_seqs: 4, port: 8000}\n")


@pytest.mark.parametrize("vars_text,field", [
    # In the inventory itself: there is no environment variable or file to look it up from.
    ("    monitoring: {enabled: true, alertmanager: {webhook_url: 'https://hooks.example/SECRET'}}\n",
     "monitoring.alertmanager.webhook_url"),
    # Hashed (bcrypt) into the web config: a lookup of the password cannot rebuild the hash.
    ("    monitoring: {enabled: true, alertmanager: {mode: none}, web: {basic_auth_user: prom, "
     "basic_auth_password_env: SG_TEST_PASSWORD}}\n", "ansible export"),
])
def test_a_secret_a_lookup_cannot_rebuild_is_refused_and_nothing_written(inventory_dir, tmp_path, monkeypatch,
                                                                         vars_text, field):
    monkeypatch.setenv("SG_TEST_PASSWORD", "pw-NEVER-WRITTEN")
    inventory = one_host(inventory_dir, vars_text)
    with pytest.raises(ConfigError) as refused:
        export_inventory(inventory, tmp_path / "out")
    assert {p.field for p in refused.value.problems} == {field}
    assert "never writes a secret's value" in str(refused.value) and "NEVER-WRITTEN" not in str(refused.value)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("guard,noted", [("auto", True), ("earlyoom", False)])
def test_a_choice_apply_makes_on_the_live_node_is_named_where_the_export_made_it_offline(inventory_dir, tmp_path,
                                                                                          guard, noted):
    inventory = one_host(inventory_dir, f"    earlyoom: {{guard: {guard}}}\n")
    choices = offline_choices(inventory.host("h"))
    assert bool(choices) is noted and all(c.startswith("earlyoom: ") for c in choices)
    export_inventory(inventory, tmp_path / "out")
    assert ("Chosen without seeing the node" in (tmp_path / "out" / "host_vars" / "h.yml").read_text()) is noted


def test_paths_stay_under_out_and_links_are_refused_not_followed(inventory_dir, tmp_path):
    # sparkguard.safe_write: a link (or a non-file) at an output path is exit 2 before anything is written.
    inventory = one_host(inventory_dir)
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (out / "host_vars").mkdir(parents=True)
    (out / "host_vars" / "gone.yml").write_text("old host\n")
    for planted in (out / "site.yml", out / "host_vars" / "h.yml"):
        planted.symlink_to(elsewhere / planted.name)
        with pytest.raises(OutputPathError, match=re.escape(str(planted.name)) + ".*symbolic link") as refused:
            export_inventory(inventory, out)
        assert refused.value.exit_code == 2 and list(elsewhere.iterdir()) == []
        assert sorted(p.name for p in out.rglob("*")) == sorted(["gone.yml", "host_vars", planted.name])
        planted.unlink()
    (out / "host_vars").rename(tmp_path / "moved")
    (out / "host_vars").symlink_to(elsewhere)             # a linked directory is refused too, never emptied
    (elsewhere / "keep.yml").write_text("not sparkguard's\n")
    with pytest.raises(OutputPathError, match="host_vars"):
        export_inventory(inventory, out)
    assert [p.name for p in elsewhere.iterdir()] == ["keep.yml"]
    (out / "host_vars").unlink()
    (tmp_path / "moved").rename(out / "host_vars")
    written = export_inventory(inventory, out)
    relative = sorted(p.relative_to(out.resolve()).as_posix() for p in written)
    assert [p for p in relative if not p.startswith("files/h/")] == [
        ".ansible-lint", ".yamllint", "ansible.cfg", "host_vars/h.yml", "inventory.yml", "site.yml", ROLE_TASKS]
    assert "files/h/etc/sparkguard/node.json" in relative
    assert not (out / "host_vars" / "gone.yml").exists()
    assert not any(p.is_symlink() for p in written)
    for relative in ("../escape.yml", "host_vars/../../escape.yml", "/etc/passwd"):
        with pytest.raises(ConfigError):
            _target(out.resolve(), relative)


def test_format_files_is_still_the_default_and_unchanged(tmp_path):
    example = REPO / "inventory" / "example"
    assert run_cli("render", str(example), "--out", str(tmp_path / "a")).returncode == 0
    assert run_cli("render", str(example), "--out", str(tmp_path / "b"), "--format", "files").returncode == 0
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert files and files == sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*") if p.is_file())
    assert all((tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes() for f in files)


def test_site_yml_is_one_static_play_that_ansible_accepts(inventory_dir, tmp_path):
    out = tmp_path / "out"
    done = run_cli("render", str(inventory_dir(f"all:\n{NODE}  hosts:\n    h: {{ssh_host: 192.0.2.1}}\n")),
                   "--format", "ansible", "--out", str(out))
    assert done.returncode == 0, done.stderr
    text = (out / "site.yml").read_text()
    assert text.startswith("# Generated by sparkguard ") and "crash safety" in text and "node lock" in text
    (play,) = yaml.safe_load(text)
    assert play["hosts"] == "all" and play["gather_facts"] is False
    # Role by role, as apply goes (registry order); each role's include tagged with it and with every role
    # that needs it, so `--tags swap` brings base along.
    includes = [task for task in play["tasks"] if "ansible.builtin.include_tasks" in task]
    assert [task["vars"]["sg_role"] for task in includes] == [role.name for role in registry.roles()]
    for task in includes:
        role = task["vars"]["sg_role"]
        needed_by = sorted(r.name for r in registry.roles() if role in [n.name for n in registry.with_requirements(r.name)])
        assert sorted(task["tags"]) == needed_by and task["ansible.builtin.include_tasks"]["apply"]["tags"] == task["tags"]
    assert "swap" in next(t["tags"] for t in includes if t["vars"]["sg_role"] == "base")
    # Within a role, converge's order of kinds.
    names = [task["name"] for task in yaml.safe_load((out / ROLE_TASKS).read_text())]
    kinds = ["Every secret", "Files a package's", "Packages", "Directories", "Files:", "Edits", "Files that must go",
             "Unit instances", "Systemd daemon-reload", "Masks", "Sysctls", "Services restarted", "Services reloaded",
             "Services running", "Ensure"]
    first = [next(i for i, name in enumerate(names) if name.startswith(kind)) for kind in kinds]
    assert first == sorted(first), names
    checked = subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", "site.yml"], cwd=out,
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


# ---------------------------------------------------------------- the fstab edit


def line_by_line(text: str, off: bool) -> str:
    """The edit as roles/swap/fstab.py read it before it became a regexp: the oracle."""
    def swap_entry(line: str) -> bool:
        fields = line.split()
        return len(fields) >= 3 and not fields[0].startswith("#") and fields[2] == "swap"
    lines = text.split("\n")
    if off:
        return "\n".join(MARKER + line if swap_entry(line) else line for line in lines)
    return "\n".join(line[len(MARKER):] if line.startswith(MARKER) else line for line in lines)


FSTABS = [
    "",
    "# UNCONFIGURED FSTAB FOR BASE SYSTEM\n",
    "UUID=1 / ext4 defaults 0 1\n/swap.img\tnone\tswap\tsw\t0\t0\n# /old none swap sw 0 0\n",
    "  /dev/sdb2   none   swap   sw   0 0\nLABEL=s none swap\n/x /y swapfs d 0 0\n/a /b swap",
    "/dev/zram0 none swap defaults,pri=100 0 0\r\n#sparkguard-swap-off# /swapfile none swap sw 0 0\n",
    "a b c swap\n#comment none swap\n\n\n/dev/x none swap sw 0 0\n /dev/y none swap sw",
    "tmpfs /tmp tmpfs defaults 0 0\n/dev/vdb none swap sw 0 0 # trailing\nü none swap sw\n",
]


@pytest.mark.parametrize("text", FSTABS)
def test_fstab_edit_as_data_equals_the_line_by_line_reading(text):
    off, on = FileEdit("/etc/fstab", *DISABLE, "off"), FileEdit("/etc/fstab", *ENABLE, "on")
    assert off.transform(text) == line_by_line(text, off=True)
    assert on.transform(text) == line_by_line(text, off=False)
    assert on.transform(off.transform(text)) == on.transform(text)  # off then on: back to the operator's file
    assert off.transform(off.transform(text)) == off.transform(text)


# ---------------------------------------------------------------- the play's tasks, run by ansible-playbook


def run_tasks(out: Path, names: list[str], state: dict, workdir: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """The generated tasks/role.yml's tasks ``names`` with site.yml's vars, against this machine, over ``state``
    (every item of role "t"); a file's ``src`` is found under ``workdir``, the play's directory."""
    (play,) = yaml.safe_load((out / "site.yml").read_text())
    tasks = [t for t in yaml.safe_load((out / ROLE_TASKS).read_text()) if t["name"] in names]
    assert len(tasks) == len(names)
    workdir.mkdir(exist_ok=True)
    (workdir / "play.yml").write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "connection": "local",
                                                       "vars": {**play["vars"], "sg_role": "t"},
                                                       "tasks": tasks}]))
    (workdir / "state.yml").write_text(dump({STATE_VAR: _Unsafe(state)}))
    command = [str(BIN / "ansible-playbook"), "-i", "localhost,", "-e", f"ansible_python_interpreter={sys.executable}",
               "-e", "@state.yml", "play.yml"]
    return subprocess.run(command, cwd=workdir, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "ANSIBLE_NOCOLOR": "1", **(env or {})})


def recap_changed(result: subprocess.CompletedProcess) -> int:
    return int(re.search(r"changed=(\d+)", result.stdout.split("PLAY RECAP")[-1]).group(1))


FILE_TASKS = ["Files: their directories, created where missing", "Files"]
EDIT_TASKS = ["Edits of node-owned files: is the file there?", "Edits of node-owned files"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    (out / "site.yml").write_text(site_text())
    (out / "tasks").mkdir()
    (out / ROLE_TASKS).write_text(role_tasks_text())
    return out


def local_file(tmp_path: Path, name: str, content: str, **extra) -> ManagedFile:
    return ManagedFile(str(tmp_path / "node" / name), content, mode=extra.pop("mode", "0640"), owner=USER, group=GROUP,
                       **extra)


def test_copy_and_replace_tasks_write_what_apply_writes_and_change_nothing_twice(site, inventory_dir, tmp_path,
                                                                                  monkeypatch):
    """Contents with {{ }} and odd characters, a file built from lookups of an env var and a file, a validator
    that needs the file's own name, mode, a literal $ and %; fstab texts edited off and on."""
    check = ("test \"$(basename {path})\" = checked.conf && [ \"$(stat -c %a {path})\" = 640 ] "
             "&& [ '$HOME' = '$''HOME' ] && grep -q '{{ x }}' {path}")
    files = [local_file(tmp_path, f"plain{i}", text) for i, text in enumerate(CONTENTS)]
    files.append(local_file(tmp_path, "checked.conf", "{{ x }}\n", validate=check))
    edits = []
    for i, text in enumerate(FSTABS):
        for name, (regexp, replace) in (("off", DISABLE), ("on", ENABLE)):
            (tmp_path / "node").mkdir(exist_ok=True)
            (tmp_path / "node" / f"fstab{i}.{name}").write_text(text)
            edits.append(FileEdit(str(tmp_path / "node" / f"fstab{i}.{name}"), regexp, replace, name))
    edits.append(FileEdit(str(tmp_path / "node" / "absent"), *DISABLE, "absent stays absent"))
    data = state_data([DesiredState("t", files=tuple(files), edits=tuple(edits))], StandIns("a", "0"))

    # A secret file exactly as the vllm role builds it, its path moved here: lookups, never the value.
    token, key_file = "hf_tok3n", tmp_path / "api.key"
    key_file.write_text("\n  k3y \n")
    monkeypatch.setenv("SG_TEST_TOKEN", token)
    entry = one_host(inventory_dir, vllm_vars(key_file)).host("h")
    exported, _ = host_data(entry)
    (secret,) = [f for f in exported["files"] if f["path"].endswith(".env")]
    secret |= {"role": "t", "path": str(tmp_path / "node" / "secret.env"), "owner": USER, "group": GROUP}
    applied = next(f.content for s in host_states(entry) for f in s.files if f.path.endswith(".env"))
    data["files"].append(secret)
    # As the export writes them: plain contents under files/HOST/PATH (copied from there), the secret file in parts.
    for relative, text in contents_as_files("h", data).items():
        (tmp_path / "play" / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "play" / relative).write_bytes(text.encode())
    assert [f["path"] for f in data["files"] if "src" not in f] == [secret["path"]]

    first = run_tasks(site, FILE_TASKS + EDIT_TASKS, data, tmp_path / "play", env={"SG_TEST_TOKEN": token})
    assert first.returncode == 0, first.stdout[-4000:]
    for managed in files:
        path = Path(managed.path)
        assert path.read_bytes() == managed.content.encode() and stat.S_IMODE(path.stat().st_mode) == 0o640
    assert (tmp_path / "node" / "secret.env").read_text() == applied and token in applied and "\nVLLM_API_KEY=k3y\n" in applied
    assert token not in first.stdout
    for edit in edits[:-1]:
        name = Path(edit.path).name
        assert Path(edit.path).read_bytes().decode() == edit.transform(FSTABS[int(name[5:name.index(".")])]), name
    assert not (tmp_path / "node" / "absent").exists()
    assert not list((tmp_path / "node").glob(".sparkguard-stage"))

    again = run_tasks(site, FILE_TASKS + EDIT_TASKS, data, tmp_path / "play", env={"SG_TEST_TOKEN": token})
    assert again.returncode == 0 and recap_changed(again) == 0, again.stdout[-4000:]


def test_a_failed_validator_leaves_the_live_file_and_no_staging(site, tmp_path):
    live = tmp_path / "node" / "app.conf"
    live.parent.mkdir()
    live.write_text("old\n")
    bad = local_file(tmp_path, "app.conf", "new\n", validate="grep -q old {path}")
    result = run_tasks(site, FILE_TASKS, state_data([DesiredState("t", files=(bad,))], StandIns("a", "0")),
                       tmp_path / "play")
    assert result.returncode != 0 and "sparkguard: validation failed for " + str(live) in result.stdout
    assert live.read_text() == "old\n" and not (live.parent / ".sparkguard-stage").exists()


# ---------------------------------------------------------------- validate, ensure, sysctl: the shell parts


@pytest.mark.parametrize("check,owner,ok", [
    ("test \"$(basename {path})\" = app.conf && grep -qx hello {path}", USER, True),
    ("[ \"$(stat -c %a {path})\" = 640 ] && [ \"$(stat -c %U {path})\" = " + USER + " ]", USER, True),
    ("[ \"$(stat -c %a {path})\" = 600 ]", None, True),  # an edit: the live file's mode
    ("printf '%s' \"{path}\" | grep -q '/.sparkguard-stage/app.conf$'", USER, True),
    ("false", USER, False),
])
def test_a_validator_runs_on_a_copy_staged_where_and_as_apply_stages_it(tmp_path, check, owner, ok):
    live, temporary = tmp_path / "etc" / "app.conf", tmp_path / "ansible-tmp-source"
    live.parent.mkdir()
    live.write_text("live\n")
    live.chmod(0o600)
    temporary.write_text("hello\n")
    where = {"owner": owner, "group": GROUP, "mode": "0640"} if owner else {}
    script = staged_check(check, str(live), **where)
    done = subprocess.run(["/bin/sh", "-c", script, "sparkguard-validate", str(temporary)], capture_output=True, text=True)
    assert (done.returncode == 0) is ok, done.stderr
    assert ("validation failed for " + str(live) in done.stderr) is not ok
    assert live.read_text() == "live\n" and not (live.parent / ".sparkguard-stage").exists()


@pytest.mark.parametrize("check,fix,rc,changed,ran", [
    ("true", "touch ran", 0, False, False),
    ("false", "touch ran", 0, True, True),
    ("test -e nothing-here", "echo -n partial; touch ran", 0, True, True),
    ("exit 1", "exit 3", 3, False, False),
    ("[ \"$1\" = '' ] && false", "[ \"$HOME\" != '$HOME' ] && touch ran", 0, True, True),
])
def test_ensure_runs_the_fix_only_when_the_check_fails(tmp_path, check, fix, rc, changed, ran):
    done = subprocess.run(["/bin/sh", "-c", ENSURE_SCRIPT, "sh", check, fix], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == rc
    assert (done.stdout.rstrip("\n").split("\n")[-1] == CHANGED) is changed
    assert (tmp_path / "ran").exists() is ran


@pytest.mark.parametrize("live,wanted,changed", [
    ("10", "10", False), ("60", "10", True), ("4\t4 1  7", "4 4 1 7", False), ("4 4 1 7", "4 4 1 8", True),
    ("*", "*", False),
])
def test_sysctl_sets_only_a_value_that_differs(tmp_path, live, wanted, changed):
    """A stand-in sysctl(8) in PATH: the script compares whitespace-normalized, as apply does."""
    fake = tmp_path / "sysctl"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = -n ]; then cat \"$(dirname \"$0\")/value\"; else echo \"$@\" >> "
                    "\"$(dirname \"$0\")/written\"; fi\n")
    fake.chmod(0o755)
    (tmp_path / "value").write_text(live + "\n")
    done = subprocess.run(["/bin/sh", "-c", SYSCTL_SCRIPT, "sh", "vm.x", wanted], capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"})
    assert done.returncode == 0 and (done.stdout.strip() == CHANGED) is changed
    assert ((tmp_path / "written").read_text() == f"-q -w vm.x={wanted}\n") if changed else not (tmp_path / "written").exists()


def test_a_webhook_url_from_the_environment_is_looked_up_as_json_and_rebuilds_alertmanager_yml(site, inventory_dir,
                                                                                               tmp_path, monkeypatch):
    """The README's example (webhook_url_env) exports: the URL stands in alertmanager.yml as a JSON string, and
    the play rebuilds that byte for byte with `lookup('env', ...) | to_json`; the value is never written."""
    url = "https://hooks.example/services/T0/s3cr3t?a=1&b=%22x%22"
    monkeypatch.setenv("SG_HOOK", url)
    entry = one_host(inventory_dir, "    monitoring: {enabled: true, alertmanager: {webhook_url_env: SG_HOOK}}\n").host("h")
    exported, problems = host_data(entry)
    assert problems == [] and url not in json.dumps(exported)
    (config,) = [f for f in exported["files"] if f["path"] == "/etc/prometheus/alertmanager.yml"]
    assert {"env": "SG_HOOK", "json": True} in config["parts"] and config["secret"]
    assert {"role": "monitoring", "env": "SG_HOOK", "json": True} in exported["secrets"]
    applied = next(f.content for s in host_states(entry) for f in s.files if f.path == config["path"])
    config |= {"role": "t", "path": str(tmp_path / "node" / "alertmanager.yml"), "owner": USER, "group": GROUP}
    config.pop("validate")  # amtool's check runs on the node; here the bytes are compared with apply's
    data = state_data([], StandIns("a", "0")) | {"files": [config]}
    first = run_tasks(site, FILE_TASKS, data, tmp_path / "play", env={"SG_HOOK": url})
    assert first.returncode == 0, first.stdout[-4000:]
    assert (tmp_path / "node" / "alertmanager.yml").read_text() == applied and json.dumps(url) in applied
    assert url not in first.stdout
    again = run_tasks(site, FILE_TASKS, data, tmp_path / "play", env={"SG_HOOK": url})
    assert again.returncode == 0 and recap_changed(again) == 0, again.stdout[-4000:]
