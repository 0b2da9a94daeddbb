"""Files that are not inventories, and inventories that attack the reader: exit 2 with one paragraph, no traceback.

Every case runs the real CLI (`validate` and `render`) in a subprocess with a memory and time
limit, as a reviewer's CI job would run it on a pull request. The module prints a summary table:
inputs tried, rejected with exit 2, tracebacks (must be 0), files written outside --out (must be 0).
"""

from __future__ import annotations

import json
import resource
import subprocess
from pathlib import Path

import pytest

from tests.conftest import SPARKGUARD
from tests.reporting import report

GOOD_HOST = "all:\n  vars:\n    node: {memory_total_gib: 121.7}\n  hosts:\n    spark-01: {ssh_host: 192.0.2.11}\n"
LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))
ANSIBLE_CYCLE = json.dumps({"_meta": {"hostvars": {"spark-01": {"ansible_host": "192.0.2.11"}}},
                            "all": {"children": ["a"]}, "a": {"children": ["b"]}, "b": {"children": ["a"]}})
ANSIBLE_HOSTS_STRING = json.dumps({"_meta": {"hostvars": {}}, "all": {"children": ["spark"]}, "spark": {"hosts": "spark-01"}})

# name -> (hosts.yml bytes, extra files {relative path: bytes})
CASES: dict[str, tuple[bytes, dict[str, bytes]]] = {
    "not UTF-8 (latin-1)": ("all:\n  hosts:\n    caf\xe9: {ssh_host: 192.0.2.1}\n".encode("latin-1"), {}),
    "UTF-16 with BOM": (GOOD_HOST.encode("utf-16"), {}),
    "binary": (b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)), {}),
    "deep nesting": (("a: " + "[" * 5000 + "]" * 5000 + "\n").encode(), {}),
    "recursive alias": (b"all: &a\n  children:\n    x: *a\n", {}),
    "billion laughs": (LAUGHS.encode(), {}),
    "5000-digit port": (("all:\n  hosts:\n    h: {ssh_host: 192.0.2.1, ssh_port: " + "9" * 5000 + "}\n").encode(), {}),
    "hosts written as a list of mappings": (b"all:\n  hosts:\n    - {name: h, ssh_host: 192.0.2.1}\n", {}),
    "256-character host name": (f"all:\n  hosts:\n    {'h' * 256}: {{ssh_host: 192.0.2.1}}\n".encode(), {}),
    "host named ..": (b"all:\n  vars:\n    node: {memory_total_gib: 121.7}\n  hosts:\n    '..': {ssh_host: 192.0.2.1}\n", {}),
    "host named with an absolute path": (b"all:\n  vars:\n    node: {memory_total_gib: 121.7}\n  hosts:\n"
                                         b"    /tmp/sg-victim: {ssh_host: 192.0.2.1}\n", {}),
    "host name climbing into another directory": (b"all:\n  hosts:\n    ../../etc/hosts: {ssh_host: 192.0.2.1}\n", {}),
    "host name starting with -": (b"all:\n  hosts:\n    -rf: {ssh_host: 192.0.2.1}\n", {}),
    "hf_token_file: /dev/zero": (b"all:\n  vars:\n    node: {memory_total_gib: 121.7, device_profile: cpu-only}\n"
                                 b"    vllm: {hf_token_file: /dev/zero, models: {m: {model: org/m, shape: Llama-3.1-8B}}}\n"
                                 b"  hosts:\n    h: {ssh_host: 192.0.2.1}\n", {}),
    "ansible-inventory --list JSON with a group cycle": (ANSIBLE_CYCLE.encode(), {}),
    "ansible-inventory --list JSON, hosts as a string": (ANSIBLE_HOSTS_STRING.encode(), {}),
    "a host range of a million hosts": (b"all:\n  hosts:\n    node-[000000:999999]: {ssh_host: 192.0.2.1}\n", {}),
    "group_vars/all.txt (ignored extension)": (GOOD_HOST.encode(), {"group_vars/all.txt": b"earlyoom: {term_percent: 9}\n"}),
    "group_vars/all/notes.txt (not a vars file)": (GOOD_HOST.encode(), {"group_vars/all/notes.txt": b"earlyoom: {}\n"}),
    "group_vars for no such group": (GOOD_HOST.encode(), {"group_vars/sprak.yml": b"earlyoom: {term_percnt: 9}\n"}),
    "host_vars for no such host": (GOOD_HOST.encode(), {"host_vars/spark-1.yml": b"earlyoom: {}\n"}),
    "empty file": (b"", {}),
    "a YAML scalar": (b"just text\n", {}),
    "NUL in a value": (b"all:\n  hosts:\n    h: {ssh_host: \"192.0.2.1\\0\"}\n", {}),
}
RESULTS: dict[str, tuple[int, bool, bool]] = {}


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SPARKGUARD, *args], capture_output=True, text=True, timeout=60, preexec_fn=_limit)


@pytest.fixture(scope="module", autouse=True)
def summary():
    yield
    tracebacks = sum(1 for _, tb, _ in RESULTS.values() if tb)
    outside = sum(1 for _, _, out in RESULTS.values() if out)
    rejected = sum(1 for rc, _, _ in RESULTS.values() if rc == 2)
    report(f"\nbad inputs: {len(RESULTS)} tried, {rejected} rejected with exit 2, {tracebacks} tracebacks, "
          f"{outside} wrote outside --out")


@pytest.mark.parametrize("case", CASES)
def test_bad_input_exits_2_with_one_paragraph(tmp_path, case):
    hosts, extra = CASES[case]
    inventory = tmp_path / "inv"
    inventory.mkdir()
    (inventory / "hosts.yml").write_bytes(hosts)
    for relative, data in extra.items():
        (inventory / relative).parent.mkdir(parents=True, exist_ok=True)
        (inventory / relative).write_bytes(data)
    before = {p for p in tmp_path.rglob("*")} | set(Path("/tmp").glob("sg-victim*"))
    validate = _run("validate", str(inventory))
    out = tmp_path / "review" / "out"
    render = _run("render", str(inventory), "--out", str(out))
    after = {p for p in tmp_path.rglob("*")} | set(Path("/tmp").glob("sg-victim*"))
    written_outside = [p for p in after - before if out not in p.parents and p != out and p.parent != tmp_path / "review"]
    traceback = "Traceback" in validate.stderr + render.stderr
    RESULTS[case] = (validate.returncode, traceback, bool(written_outside))
    assert not traceback, validate.stderr[-2000:] + render.stderr[-2000:]
    assert validate.returncode == 2, (validate.returncode, validate.stdout, validate.stderr)
    assert render.returncode == 2, (render.returncode, render.stderr)
    assert "sparkguard:" in validate.stderr and len(validate.stderr) < 4000
    assert written_outside == [], written_outside
    assert not (tmp_path / "review").exists() or not any((tmp_path / "review").iterdir()) or out.exists()
