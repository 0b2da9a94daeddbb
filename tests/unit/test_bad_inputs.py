"""Files that are not inventories, and inventories that attack the reader: exit 2 with one paragraph, no traceback.

Every case runs the real CLI (`validate`, `render` and the Ansible export) in a subprocess with a memory and time
limit, as a reviewer's CI job would run it on a pull request. The module prints a summary table:
inputs tried, rejected with exit 2, tracebacks (must be 0), files written outside --out (must be 0).
"""

from __future__ import annotations

import functools
import json
import os
import resource
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.certs import self_signed
from tests.conftest import INIT_PIN, SPARKGUARD
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


# Issue 27: files on the operator's machine, secrets under any spelling, credentials in URLs, vars files from
# outside the inventory. @TMP@ is the test's directory (the inventory is @TMP@/inv); an extra file is bytes, a
# Link (a symlink to a target), FIFO, or a function that makes the bytes (a throwaway certificate and key).
# The canary is in the environment (so in /proc/self/environ) and in every secret: no output may show it.
CANARY = "s3cr3t-canary-27"


@dataclass(frozen=True)
class Link:
    target: str


FIFO = "fifo"


@functools.lru_cache(maxsize=1)
def _pem() -> tuple[bytes, bytes]:
    with tempfile.TemporaryDirectory() as directory:
        cert, key = self_signed(Path(directory), ["192.0.2.11"])
        return cert.read_bytes(), key.read_bytes()


def _cert() -> bytes:
    return _pem()[0]


def _key() -> bytes:
    return _pem()[1]


def _bundle() -> bytes:
    return _pem()[0] + _pem()[1]


def _key_and_cert() -> bytes:
    return _pem()[1] + _pem()[0]


def _web(web: str, profile: str = "dgx-spark") -> bytes:
    return (f"all:\n  vars:\n    node: {{memory_total_gib: 121.7, device_profile: {profile}}}\n"
            f"    monitoring: {{enabled: true, alertmanager: {{mode: none}}, web: {web}}}\n"
            f"  hosts:\n    spark-01: {{ssh_host: 192.0.2.11}}\n").encode()


def _tls(cert: str, key: str = "@TMP@/inv/key.pem", ca: str = "") -> bytes:
    return _web(f"{{tls_cert_file: {cert}, tls_key_file: {key}{', tls_ca_file: ' + ca if ca else ''}}}")


def _host(extra: str) -> bytes:
    return (f"all:\n  vars:\n    node: {{memory_total_gib: 121.7, device_profile: dgx-spark}}\n"
            f"  hosts:\n    spark-01: {{ssh_host: 192.0.2.11, {extra}}}\n").encode()


def _vllm(options: str) -> bytes:
    return _host(f"vllm: {{image: 'nvcr.io/nvidia/vllm:25.09-py3', models: {{m: {{model: org/m, shape: Llama-3.1-8B,"
                 f" options: {options}}}}}}}")


CASES.update({
    "tls_cert_file: /proc/self/environ": (_tls("/proc/self/environ"), {"key.pem": _key}),
    "tls_cert_file: a symlink to /proc/self/environ": (_tls("@TMP@/inv/cert.pem"),
                                                       {"cert.pem": Link("/proc/self/environ"), "key.pem": _key}),
    "tls_cert_file: a FIFO": (_tls("@TMP@/inv/cert.pem"), {"cert.pem": FIFO, "key.pem": _key}),
    "tls_cert_file: a certificate and its key in one file": (_tls("@TMP@/inv/cert.pem"),
                                                             {"cert.pem": _bundle, "key.pem": _key}),
    "tls_cert_file: the private key": (_tls("@TMP@/inv/key.pem"), {"key.pem": _key}),
    "tls_cert_file: text that is no certificate": (_tls("@TMP@/inv/cert.pem"),
                                                    {"cert.pem": f"TOKEN={CANARY}\n".encode(), "key.pem": _key}),
    "tls_ca_file: 2 MiB": (_tls("@TMP@/inv/cert.pem", ca="@TMP@/inv/ca.pem"),
                           {"cert.pem": _cert, "key.pem": _key, "ca.pem": _cert() * 3000}),
    "tls_key_file: a key and a certificate": (_tls("@TMP@/inv/cert.pem"), {"cert.pem": _cert, "key.pem": _key_and_cert}),
    "basic_auth_password_file: /dev/zero": (_web("{basic_auth_user: prom, basic_auth_password_file: /dev/zero}"), {}),
    "vllm.api_key_file: /proc/self/environ": (_vllm("{}").replace(b"vllm: {", b"vllm: {api_key_file: /proc/self/environ, "),
                                              {}),
    "ssh_key: /proc/self/environ": (_host("ssh_key: /proc/self/environ"), {}),
    "budget.training.model: /proc/self/environ": (_host("budget: {training: {model: /proc/self/environ}}"), {}),
    "vllm option hf-token": (_vllm(f"{{hf-token: {CANARY}}}"), {}),
    "vllm option --api-key": (_vllm(f"{{--api-key: {CANARY}}}"), {}),
    "vllm option Api-Key": (_vllm(f"{{Api-Key: {CANARY}}}"), {}),
    "vllm option hf_token": (_vllm(f"{{hf_token: {CANARY}}}"), {}),
    "vllm option with a URL holding credentials": (_vllm(f"{{otlp-traces-endpoint: 'http://u:{CANARY}@h:4317'}}"), {}),
    "grafana.prometheus_url with user:password@": (
        _web("{}").replace(b"web: {}", f"grafana: {{prometheus_url: 'https://u:{CANARY}@p:9090'}}".encode()), {}),
    "external_urls with credentials": (
        _web("{}").replace(b"mode: none", f"mode: external, external_urls: ['https://u:{CANARY}@am:9093']".encode()), {}),
    "a secret-looking key in a block": (_host(f"earlyoom: {{password: {CANARY}}}"), {}),
    "host_vars linked to a secrets file outside the inventory": (
        GOOD_HOST.encode(), {"host_vars/spark-01.yml": Link("@TMP@/outside/secrets.yml"),
                             "../outside/secrets.yml": f"auths:\n  ghcr.io: {{auth: {CANARY}}}\n".encode()}),
    "host_vars linked to an outside file that is not a mapping": (
        GOOD_HOST.encode(), {"host_vars/spark-01.yml": Link("@TMP@/outside/token"),
                             "../outside/token": f"{CANARY}\n".encode()}),
    "host_vars linked to an outside file with a YAML error": (
        GOOD_HOST.encode(), {"host_vars/spark-01.yml": Link("@TMP@/outside/bad.yml"),
                             "../outside/bad.yml": f"token: '{CANARY}\n  x: [\n".encode()}),
    "group_vars/all.yml linked to /proc/self/environ": (GOOD_HOST.encode(),
                                                        {"group_vars/all.yml": Link("/proc/self/environ")}),
    "hosts.yml linked to a file outside the inventory": (b"", {"../outside/hosts.yml": GOOD_HOST.replace(
        "    node:", f"    notes: {CANARY}\n    node:").encode()}),
})
# Issue 27, bounded reading: every loop or size limit is counted before it is spent, then exit 2 with one
# paragraph. Under the address-space limit below, each of these ran out of memory (a traceback) before.
def _shared_children(levels: int, hostvars: dict) -> bytes:
    """`ansible-inventory --list` JSON where groups gN and kN both hold g(N+1) and k(N+1): 2**levels paths."""
    document: dict = {"_meta": {"hostvars": {"spark-01": hostvars}}, "all": {"children": ["g0", "k0"]}}
    for level in range(levels):
        for prefix in "gk":
            document[f"{prefix}{level}"] = ({"children": [f"g{level + 1}", f"k{level + 1}"]} if level < levels - 1
                                            else {"hosts": ["spark-01"]})
    return json.dumps(document, separators=(",", ":")).encode()


NODE_VARS = "all:\n  vars:\n    node: {memory_total_gib: 121.7}\n"
CASES.update({
    "a host range key of 16.7 million hosts (h[0:4095]x[0:4095])": (
        (NODE_VARS + "  hosts:\n    h[0:4095]x[0:4095]: {ssh_host: 192.0.2.1}\n").encode(), {}),
    "ansible-inventory --list JSON of shared child groups (2**30 paths, 2.3 KB)": (
        _shared_children(30, {"ansible_host": "192.0.2.11", "ansible_port": "not-a-port"}), {}),
    "ansible-inventory --list JSON nested deeper than 32 groups": (_shared_children(40, {}), {}),
    "YAML groups that hold each other by name": (
        (NODE_VARS + "  hosts:\n    spark-01: {ssh_host: 192.0.2.11}\n  children:\n    a:\n      children: {b: {}}\n"
         "    b:\n      children: {a: {}}\n").encode(), {}),
    "4097 hosts": ((NODE_VARS + "  hosts:\n    h[0000:4095]: {ssh_host: 192.0.2.1}\n    one-more: "
                    "{ssh_host: 192.0.2.2}\n").encode(), {}),
    "a 4096-host range in 64 groups": ((NODE_VARS + "  children:\n" + "".join(
        f"    g{i}:\n      hosts:\n        h[0000:4095]: {{ssh_host: 192.0.2.1}}\n" for i in range(64))).encode(), {}),
    "a 600-item list in all.vars of 4096 hosts": (
        ("all:\n  vars:\n    node: {memory_total_gib: 121.7}\n    junk: [" + ", ".join(["1"] * 600) + "]\n"
         "  hosts:\n    h[0000:4095]: {ssh_host: 192.0.2.1}\n").encode(), {}),
    "host_vars/spark-01.yml: a symlink to itself": (GOOD_HOST.encode(), {"host_vars/spark-01.yml": Link("spark-01.yml")}),
    "group_vars/all: two symlinks to each other": (GOOD_HOST.encode(), {"group_vars/all": Link("other"),
                                                                         "group_vars/other": Link("all")}),
    "host_vars/spark-01/: a symlink loop inside": (GOOD_HOST.encode(), {"host_vars/spark-01/a.yml": Link("a.yml")}),
    "group_vars: a symlink to itself": (GOOD_HOST.encode(), {"group_vars": Link("group_vars")}),
})
RESULTS: dict[str, tuple[int, bool, bool]] = {}


def _place(path: Path, data, tmp_path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, Link):
        path.unlink(missing_ok=True)
        path.symlink_to(data.target.replace("@TMP@", str(tmp_path)))
    elif data == FIFO:
        os.mkfifo(path)
    else:
        path.write_bytes(data() if callable(data) else data)


MEMORY_LIMIT = 512 << 20  # address space per run: a reviewer's CI job, and this host, keep their memory


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*SPARKGUARD, *args], capture_output=True, text=True, timeout=60, preexec_fn=_limit,
                          env={**os.environ, "SG_CANARY": CANARY})


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
    for relative, data in extra.items():
        _place(inventory / relative, data, tmp_path)
    if case == "hosts.yml linked to a file outside the inventory":
        (inventory / "hosts.yml").symlink_to(tmp_path / "outside" / "hosts.yml")
    else:
        (inventory / "hosts.yml").write_bytes(hosts.replace(b"@TMP@", str(tmp_path).encode()))
    before = {p for p in tmp_path.rglob("*")} | set(Path("/tmp").glob("sg-victim*"))
    validate = _run("validate", str(inventory))
    out = tmp_path / "review" / "out"
    render = _run("render", str(inventory), "--out", str(out))
    export = _run("render", str(inventory), "--format", "ansible", "--out", str(tmp_path / "review" / "export"))
    after = {p for p in tmp_path.rglob("*")} | set(Path("/tmp").glob("sg-victim*"))
    written_outside = [p for p in after - before if out not in p.parents and p != out and p.parent != tmp_path / "review"
                       and tmp_path / "review" / "export" not in p.parents]
    traceback = "Traceback" in validate.stderr + render.stderr + export.stderr
    RESULTS[case] = (validate.returncode, traceback, bool(written_outside))
    assert not traceback, validate.stderr[-2000:] + render.stderr[-2000:]
    assert validate.returncode == 2, (validate.returncode, validate.stdout, validate.stderr)
    assert render.returncode == 2, (render.returncode, render.stderr)
    assert export.returncode == 2, (export.returncode, export.stderr)
    shown = validate.stdout + validate.stderr + render.stdout + render.stderr + export.stdout + export.stderr
    assert CANARY not in shown, shown  # no secret, no file content, no environment in any output
    assert "sparkguard:" in validate.stderr and len(validate.stderr) < 4000
    assert written_outside == [], written_outside
    assert not (tmp_path / "review").exists() or not any((tmp_path / "review").iterdir()) or out.exists()


# Issue 27, output paths (sparkguard.safe_write): a link planted where sparkguard writes is refused, exit 2 with
# a paragraph naming the path, and nothing is written through it. Each: (command after `sparkguard`, with @INV@,
# @OUT@ and @TMP@ filled in; the links to plant {path under @TMP@: target}; the path the paragraph names).
OUTPUTS: dict[str, tuple[list[str], dict[str, str], str]] = {
    "render --out: a link at OUT/<host>.state.yml to a file elsewhere": (
        ["render", "@INV@", "--out", "@OUT@"], {"out/spark-01.state.yml": "@TMP@/victim"}, "out/spark-01.state.yml"),
    "render --out: a dangling link at OUT/<host>.state.yml": (
        ["render", "@INV@", "--out", "@OUT@"], {"out/spark-01.state.yml": "@TMP@/created"}, "out/spark-01.state.yml"),
    "render --format ansible: a link at OUT/site.yml": (
        ["render", "@INV@", "--format", "ansible", "--out", "@OUT@"], {"out/site.yml": "@TMP@/victim"}, "out/site.yml"),
    "render --format ansible: OUT/host_vars a link to a directory elsewhere": (
        ["render", "@INV@", "--format", "ansible", "--out", "@OUT@"], {"out/host_vars": "@TMP@/victims"},
        "out/host_vars"),
    "apply --retry-file: a link to a file elsewhere": (
        ["apply", "@INV@", "--retry-file", "@TMP@/retry"], {"retry": "@TMP@/victim"}, "retry"),
    "apply --retry-file: a dangling link": (
        ["apply", "@INV@", "--retry-file", "@TMP@/retry"], {"retry": "@TMP@/created"}, "retry"),
    "init over a dangling link (requirements.txt)": (
        ["init", "@TMP@/repo", *INIT_PIN], {"repo/requirements.txt": "@TMP@/created"}, "repo/requirements.txt"),
    "init over a dangling link (the review script, chmod 0755)": (
        ["init", "@TMP@/repo", *INIT_PIN], {"repo/.sparkguard/review.sh": "@TMP@/created"}, "repo/.sparkguard/review.sh"),
    "init with a directory on the way linked elsewhere": (
        ["init", "@TMP@/repo", *INIT_PIN], {"repo/.sparkguard": "@TMP@/victims"}, "repo/.sparkguard"),
}


@pytest.mark.parametrize("case", OUTPUTS)
def test_an_output_path_with_a_planted_link_is_exit_2_and_never_written_through(tmp_path, case):
    command, links, named = OUTPUTS[case]
    inventory = tmp_path / "inv"
    inventory.mkdir()
    (inventory / "hosts.yml").write_text(GOOD_HOST)
    (tmp_path / "victim").write_text("the operator's file\n")
    (tmp_path / "victims").mkdir()
    (tmp_path / "victims" / "other.yml").write_text("the operator's file\n")
    for link, target in links.items():
        (tmp_path / link).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / link).symlink_to(target.replace("@TMP@", str(tmp_path)))
    fill = {"@INV@": str(inventory), "@OUT@": str(tmp_path / "out"), "@TMP@": str(tmp_path)}
    args = [functools.reduce(lambda text, pair: text.replace(*pair), fill.items(), word) for word in command]
    done = _run(*args)
    traceback = "Traceback" in done.stderr
    untouched = ((tmp_path / "victim").read_text() == "the operator's file\n" and not (tmp_path / "created").exists()
                 and sorted(p.name for p in (tmp_path / "victims").iterdir()) == ["other.yml"])
    RESULTS[case] = (done.returncode, traceback, not untouched)
    assert not traceback, done.stderr[-2000:]
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert untouched, sorted(p.name for p in tmp_path.rglob("*"))
    assert all((tmp_path / link).is_symlink() for link in links)  # left as found, for the operator to look at
    assert str(tmp_path / named) in done.stderr and "symbolic link" in done.stderr, done.stderr
    assert len(done.stderr) < 4000
