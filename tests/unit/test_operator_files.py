"""The one reader of files ON THE OPERATOR'S MACHINE (sparkguard.inventory.operator_files), and the settings that use it.

An inventory is a pull request's file; what it names, the renderer reads with its own rights. The reader takes
regular files only (never /proc, /sys or /dev, not through a symlink either, no FIFO or device), under a size
cap, and checks the content per kind: a certificate is CERTIFICATE blocks only, a private key file one key.
A refusal is exit 2 in validate, render, the Ansible export and apply alike, and never quotes the file.
"""

from __future__ import annotations

import os
import subprocess
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from sparkguard.errors import ConfigError
from sparkguard.hostconfig import host_config_model
from sparkguard.inventory import operator_files
from sparkguard.inventory.loader import load_inventory
from tests.certs import self_signed
from tests.conftest import REPO, SPARKGUARD, run_cli, write_inventory

CANARY = "s3cr3t-canary-operator-files"


@pytest.fixture
def pem(tmp_path) -> tuple[Path, Path]:
    return self_signed(tmp_path / "certs", ["127.0.0.1"])


def _refusal(path: str | Path, kind: str) -> str:
    reason = operator_files.check(path, kind)
    assert reason is not None, f"{path} accepted as {kind}"
    return reason


# ----------------------------------------------------------------------------------------- the reader

def test_a_proc_path_is_refused_without_being_read(monkeypatch):
    monkeypatch.setenv("SG_CANARY", CANARY)
    for path in ("/proc/self/environ", "/proc/self/status", "/sys/kernel/hostname", "/dev/zero", "/dev/stdin"):
        reason = _refusal(path, "certificate")
        assert "/proc, /sys or /dev" in reason and CANARY not in reason, reason


def test_a_symlink_to_proc_self_environ_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("SG_CANARY", CANARY)
    link = tmp_path / "cert.pem"
    link.symlink_to("/proc/self/environ")
    reason = _refusal(link, "certificate")
    assert "through a symlink" in reason and CANARY not in reason
    hop = tmp_path / "hop"
    hop.symlink_to(tmp_path / "cert.pem")  # two links on the way
    assert "/proc" in _refusal(hop, "secret")


def test_a_fifo_is_refused_and_never_opened(tmp_path):
    fifo = tmp_path / "cert.pem"
    os.mkfifo(fifo)
    assert "FIFO" in _refusal(fifo, "certificate")  # opening it would block: it returns at once


def test_a_directory_a_device_and_a_symlink_loop_are_refused(tmp_path):
    assert "directory" in _refusal(tmp_path, "secret")
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    assert "loop" in _refusal(loop, "secret")


def test_a_file_over_the_cap_is_refused(tmp_path, pem):
    cert, _ = pem
    large = tmp_path / "large.pem"
    large.write_bytes(cert.read_bytes() * (operator_files.KINDS["certificate"].max_bytes // len(cert.read_bytes()) + 1))
    assert "larger than 256 KiB" in _refusal(large, "certificate")
    token = tmp_path / "token"
    token.write_text("x" * 5000)
    assert "larger than 4 KiB" in _refusal(token, "secret")


def test_a_cert_and_key_bundle_is_refused_as_a_certificate(tmp_path, pem):
    cert, key = pem
    bundle = tmp_path / "bundle.pem"
    bundle.write_bytes(cert.read_bytes() + key.read_bytes())
    assert "private key" in _refusal(bundle, "certificate")
    assert "private key" in _refusal(key, "certificate")  # a plain key in the cert field


def test_a_key_file_holds_one_key_and_nothing_else(tmp_path, pem):
    cert, key = pem
    assert operator_files.check(key, "private-key") is None
    both = tmp_path / "both.pem"
    both.write_bytes(key.read_bytes() + cert.read_bytes())
    assert "besides the private key" in _refusal(both, "private-key")
    assert "besides the private key" in _refusal(cert, "private-key")
    two = tmp_path / "two.pem"
    two.write_bytes(key.read_bytes() * 2)
    assert "more than one" in _refusal(two, "private-key")
    encrypted = tmp_path / "encrypted.pem"
    encrypted.write_text("-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n")
    assert "encrypted" in _refusal(encrypted, "private-key")


def test_a_valid_certificate_is_read_as_it_is(tmp_path, pem):
    cert, _ = pem
    assert operator_files.check(cert, "certificate") is None
    assert operator_files.read_text(cert, "certificate") == cert.read_text().strip()
    chain = tmp_path / "chain.pem"
    chain.write_bytes(cert.read_bytes() + b"\n" + cert.read_bytes())
    assert operator_files.check(chain, "certificate") is None


def test_a_certificate_file_holds_certificate_blocks_only(tmp_path, pem):
    cert, _ = pem
    for name, data in (("text around", b"subject=CN = x\n" + cert.read_bytes()),
                       ("a secret file", f"TOKEN={CANARY}\n".encode()),
                       ("another block", cert.read_bytes().replace(b"CERTIFICATE", b"X509 CRL")),
                       ("not base64", b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n"),
                       ("not a certificate", b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"),
                       ("empty", b"")):
        path = tmp_path / "c.pem"
        path.write_bytes(data)
        reason = _refusal(path, "certificate")
        assert CANARY not in reason, (name, reason)


def test_a_missing_file_is_no_refusal_and_reads_as_none(tmp_path):
    """A review machine holds no keys: validate and render go on (placeholders); apply's preflight refuses."""
    assert operator_files.check(tmp_path / "absent.pem", "certificate") is None
    assert operator_files.read_text(tmp_path / "absent.pem", "certificate") is None
    assert "absolute" in _refusal("relative.pem", "certificate")


def test_a_refusal_at_read_time_is_a_config_error_naming_the_field(tmp_path):
    with pytest.raises(ConfigError) as caught:
        operator_files.read_text("/proc/self/environ", "secret", "vllm.hf_token_file")
    [problem] = caught.value.problems
    assert problem.field == "vllm.hf_token_file" and problem.value == "/proc/self/environ"


def test_the_export_reads_nothing_through_a_stand_in(tmp_path):
    from sparkguard.inventory import secrets

    with secrets.stand_ins(lambda env, file: f"stand-in for {file}"):
        assert secrets.read_secret(None, "/proc/self/environ") == "stand-in for /proc/self/environ"


# ----------------------------------------------------------------------------------------- the settings

def _fields(model: type[BaseModel], prefix: str = "") -> typing.Iterator[tuple[str, typing.Any]]:
    for name, info in model.model_fields.items():
        args = [info.annotation, *typing.get_args(info.annotation)]
        if typing.get_origin(info.annotation) is dict:
            args += list(typing.get_args(typing.get_args(info.annotation)[1]))
            args.append(typing.get_args(info.annotation)[1])
        nested = [a for a in args if isinstance(a, type) and issubclass(a, BaseModel)]
        if nested:
            yield from _fields(nested[0], f"{prefix}{name}.")
        else:
            yield prefix + name, info


def test_every_setting_that_names_a_file_declares_its_kind():
    """A new *_file setting is read through the reader (and checked by validate) the day it is added."""
    fields = dict(_fields(host_config_model()))
    files = {name for name in fields if name.endswith("_file") or name == "ssh_key"}
    assert {"monitoring.web.tls_cert_file", "monitoring.web.tls_key_file", "monitoring.web.tls_ca_file",
            "monitoring.web.basic_auth_password_file", "vllm.hf_token_file", "vllm.api_key_file", "ssh_key",
            "ssh_known_hosts_file"} <= files
    assert {name for name in files if operator_files.kind_of(fields[name]) is None} == set()
    assert operator_files.kind_of(fields["monitoring.web.tls_cert_file"]) == "certificate"
    assert operator_files.kind_of(fields["monitoring.web.tls_key_file"]) == "private-key"


INVENTORY = """
all:
  vars:
    node: {memory_total_gib: 121.7, device_profile: dgx-spark}
    monitoring:
      enabled: true
      alertmanager: {mode: none}
      web: {tls_cert_file: CERT, tls_key_file: KEY}
  hosts:
    spark-01: {ssh_host: 192.0.2.11}
"""


@pytest.mark.parametrize("case", ["proc", "link to proc", "fifo", "bundle", "key as cert", "too large"])
def test_validate_render_and_the_export_refuse_alike(tmp_path, pem, case):
    cert, key = pem
    target = tmp_path / "cert.pem"
    if case == "proc":
        target = Path("/proc/self/environ")
    elif case == "link to proc":
        target.symlink_to("/proc/self/environ")
    elif case == "fifo":
        os.mkfifo(target)
    elif case == "bundle":
        target.write_bytes(cert.read_bytes() + key.read_bytes())
    elif case == "key as cert":
        target = key
    else:
        target.write_bytes(b"-" * (300 * 1024))
    inventory = write_inventory(tmp_path / "inv", INVENTORY.replace("CERT", str(target)).replace("KEY", str(key)))
    env = {**os.environ, "SG_CANARY": CANARY}
    key_text = key.read_text().splitlines()[1]
    for args in (["validate"], ["render", "--out", str(tmp_path / "out")],
                 ["render", "--format", "ansible", "--out", str(tmp_path / "export")]):
        result = subprocess.run([*SPARKGUARD, args[0], str(inventory), *args[1:]], capture_output=True, text=True,
                                cwd=REPO, env=env, timeout=120)
        assert result.returncode == 2, (args, result.stderr)
        assert "Traceback" not in result.stderr
        assert "host 'spark-01', field 'monitoring.web.tls_cert_file'" in result.stderr
        assert f"= '{target}'" in result.stderr and "Allowed:" in result.stderr
        assert CANARY not in result.stderr + result.stdout and key_text not in result.stderr + result.stdout
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.crt"))


def test_a_valid_pair_renders_and_the_key_stays_out_of_the_render(tmp_path, pem):
    cert, key = pem
    inventory = write_inventory(tmp_path / "inv", INVENTORY.replace("CERT", str(cert)).replace("KEY", str(key)))
    result = run_cli("render", str(inventory), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    rendered = "".join(p.read_text() for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert "BEGIN CERTIFICATE" in rendered and "PRIVATE KEY" not in rendered


def test_apply_preflight_only_asks_that_the_files_be_there(tmp_path, pem):
    from sparkguard.facts import NodeInfo
    from sparkguard.roles.monitoring.checks import preflight

    cert, key = pem
    inventory = write_inventory(tmp_path / "inv", INVENTORY.replace("CERT", str(tmp_path / "gone.pem"))
                                .replace("KEY", str(key)))
    config = load_inventory(inventory).hosts[0].config
    info = NodeInfo(memory_total_bytes=int(121.7 * 2**30), arch="aarch64")
    [problem] = list(preflight(config, info))
    assert problem.field == "monitoring.web.tls_cert_file" and "no readable PEM certificate" in problem.allowed


@pytest.mark.parametrize("field, kind", [("ssh_key", "ssh-key"), ("vllm.api_key_file", "secret")])
def test_other_operator_files_refuse_proc_too(tmp_path, monkeypatch, field, kind):
    monkeypatch.setenv("SG_CANARY", CANARY)
    value = "/proc/self/environ"
    text = (INVENTORY.replace("      web: {tls_cert_file: CERT, tls_key_file: KEY}\n", "")
            .replace("{ssh_host: 192.0.2.11}", f"{{ssh_host: 192.0.2.11, ssh_key: {value}}}" if field == "ssh_key"
                     else "{ssh_host: 192.0.2.11, vllm: {api_key_file: " + value + "}}"))
    with pytest.raises(ConfigError) as caught:
        load_inventory(write_inventory(tmp_path / "inv", text))
    [problem] = [p for p in caught.value.problems if p.field == field]
    assert problem.host == "spark-01" and problem.value == value and "/proc" in problem.allowed
    assert CANARY not in problem.paragraph()


def test_a_model_config_path_is_read_through_the_reader_and_never_quoted(tmp_path, monkeypatch):
    from sparkguard.domain.memory.estimate import load_model

    monkeypatch.setenv("SG_CANARY", CANARY)
    with pytest.raises(ConfigError) as caught:
        load_model("/proc/self/environ")
    assert "/proc" in caught.value.problems[0].allowed and CANARY not in str(caught.value)
    config = tmp_path / "config.json"
    config.write_text(f'{{"hidden_size": "{CANARY}", "num_hidden_layers": 2, "num_attention_heads": 2,'
                      f' "vocab_size": 8}}')
    with pytest.raises(ConfigError) as caught:
        load_model(str(config))
    assert "wrong type" in str(caught.value) and CANARY not in str(caught.value)
    config.write_text(f'{{"x": "{CANARY}"')
    with pytest.raises(ConfigError) as caught:
        load_model(str(tmp_path))
    assert "not JSON" in str(caught.value) and CANARY not in str(caught.value)


def test_a_pseudo_file_is_refused_wherever_its_file_system_is_mounted(monkeypatch):
    """procfs or sysfs mounted elsewhere than /proc, /sys: its files report size 0 yet hold data."""
    monkeypatch.setattr(operator_files, "FORBIDDEN_TREES", ())
    with pytest.raises(operator_files.Refused) as caught:
        operator_files.read_bytes("/proc/self/status", 1 << 20)
    assert "pseudo-file" in caught.value.reason
