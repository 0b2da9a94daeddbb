"""monitoring.web: basic auth and TLS in front of node_exporter, Prometheus and Alertmanager.

The rendered web config is fed to the REAL Prometheus binary (Debian's package, unpacked by
dev.sh; the same exporter-toolkit as node_exporter and Alertmanager) on a loopback port, and
the node-side helper web-get (a real file) is run against it: 401 without the password, 200
with it, over TLS checked against the rendered CA.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from sparkguard.engine.render import host_states
from sparkguard.inventory.loader import load_inventory
from sparkguard.roles.monitoring import web
from tests.certs import self_signed
from tests.conftest import REPO, in_ci, run_cli, write_inventory

PASSWORD = "correct horse battery staple"
INVENTORY = """
all:
  vars:
    node: {memory_total_gib: 121.7, device_profile: dgx-spark}
    monitoring:
      enabled: true
      alertmanager: {webhook_url: 'http://192.0.2.50:9000/hook'}
      web: {basic_auth_user: prom, basic_auth_password_env: SG_TEST_WEB_PASSWORD, tls_cert_file: CERT, tls_key_file: KEY}
  hosts:
    spark-01: {ssh_host: 127.0.0.1}
"""


@pytest.fixture
def secured(tmp_path, monkeypatch):
    monkeypatch.setenv("SG_TEST_WEB_PASSWORD", PASSWORD)
    cert, key = self_signed(tmp_path, ["127.0.0.1"])
    inventory = write_inventory(tmp_path / "inv", INVENTORY.replace("CERT", str(cert)).replace("KEY", str(key)))
    entry = load_inventory(inventory).hosts[0]
    files = {f.path: f for state in host_states(entry) for f in state.files}
    return inventory, files


def test_web_files_are_root_only_secret_and_before_the_packages(secured):
    _, files = secured
    for path in (web.WEB_CONFIG, web.PASSWORD, web.KEY):
        assert files[path].mode == "0600" and files[path].secret and files[path].before_packages, path
    assert files[web.CA].mode == "0644" and not files[web.CA].secret
    config = yaml.safe_load(files[web.WEB_CONFIG].content)
    assert config["tls_server_config"] == {"cert_file": "tls.crt", "key_file": "tls.key", "min_version": "TLS12"}
    assert config["basic_auth_users"]["prom"].startswith("$2b$10$") and PASSWORD not in files[web.WEB_CONFIG].content
    for unit in ("prometheus-node-exporter.service", "prometheus.service", "prometheus-alertmanager.service"):
        dropin = files[web.web_dropin_path(unit)].content
        assert f"LoadCredential=web.yml:{web.WEB_CONFIG}" in dropin and f"LoadCredential=tls.key:{web.KEY}" in dropin
        assert ("LoadCredential=web.password:" in dropin) == (unit == "prometheus.service"), unit


def test_every_daemon_is_started_behind_the_web_config_and_prometheus_scrapes_through_it(secured):
    _, files = secured
    for defaults, unit in (("/etc/default/prometheus-node-exporter", "prometheus-node-exporter.service"),
                           ("/etc/default/prometheus", "prometheus.service"),
                           ("/etc/default/prometheus-alertmanager", "prometheus-alertmanager.service")):
        assert f"--web.config.file=/run/credentials/{unit}/web.yml" in files[defaults].content, defaults
    prometheus = yaml.safe_load(files["/etc/prometheus/prometheus.yml"].content)
    client = {"scheme": "https", "tls_config": {"ca_file": web.CA},
              "basic_auth": {"username": "prom", "password_file": "/run/credentials/prometheus.service/web.password"}}
    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    for name in ("prometheus", "node"):
        assert {k: jobs[name][k] for k in client} == client, name
    assert {k: prometheus["alerting"]["alertmanagers"][0][k] for k in client} == client


def test_the_hash_is_stable_so_a_second_apply_changes_nothing(secured):
    inventory, files = secured
    again = {f.path: f for state in host_states(load_inventory(inventory).hosts[0]) for f in state.files}
    assert again[web.WEB_CONFIG].content == files[web.WEB_CONFIG].content
    assert web.password_hash(PASSWORD, "spark-01", "prom") != web.password_hash(PASSWORD, "spark-02", "prom")


def test_render_never_shows_a_secret(secured, tmp_path):
    inventory, _ = secured
    result = run_cli("render", str(inventory), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    rendered = "".join(p.read_text(errors="replace") for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert PASSWORD not in rendered and "$2b$" not in rendered and "PRIVATE KEY" not in rendered


@pytest.mark.parametrize("settings,field", [
    ("{basic_auth_user: prom}", "monitoring.web.basic_auth_user"),
    ("{basic_auth_password_env: X}", "monitoring.web.basic_auth_password_env"),
    ("{tls_cert_file: /etc/ssl/x.crt}", "monitoring.web.tls_cert_file"),
    ("{tls_key_file: /etc/ssl/x.key}", "monitoring.web.tls_key_file"),
    ("{tls_cert_file: x.crt, tls_key_file: /k}", "monitoring.web.tls_cert_file"),
    ("{basic_auth_user: 'a b', basic_auth_password_env: X}", "monitoring.web.basic_auth_user"),
])
def test_web_settings_that_do_not_belong_together_exit_2(inventory_dir, settings, field):
    text = INVENTORY.replace(INVENTORY.splitlines()[7].strip(), f"web: {settings}")
    result = run_cli("validate", str(inventory_dir(text)))
    assert result.returncode == 2 and f"field '{field}'" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def _prometheus_binary() -> str:
    path = shutil.which("prometheus") or str(REPO / ".tools/prometheus/usr/bin/prometheus")
    if not Path(path).exists():
        if in_ci():
            pytest.fail("the prometheus binary is missing (dev.sh unpacks Debian's package): CI must run this")
        pytest.skip("prometheus binary not unpacked (./dev.sh install)")
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_real_server_refuses_without_the_password_and_web_get_reads_through(secured, tmp_path):
    _, files = secured
    creds = tmp_path / "credentials"            # what LoadCredential= makes of /etc/sparkguard/web
    creds.mkdir()
    for name, path in (("web.yml", web.WEB_CONFIG), ("tls.crt", web.CERT), ("tls.key", web.KEY),
                       ("web.password", web.PASSWORD), ("ca.crt", web.CA)):
        (creds / name).write_text(files[path].content)
    (tmp_path / "p.yml").write_text("global: {}\n")
    port = _free_port()
    server = subprocess.Popen([_prometheus_binary(), f"--config.file={tmp_path / 'p.yml'}",
                               f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                               f"--web.config.file={creds / 'web.yml'}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd="/")
    helper = tmp_path / "web-get"
    helper.write_text(files[web.WEB_GET].content)
    url = f"https://127.0.0.1:{port}/-/ready"
    try:
        ok = subprocess.run([sys.executable, str(helper), "--wait", "30", "--user", "prom", "--password-file",
                             str(creds / "web.password"), "--ca", str(creds / "ca.crt"), url],
                            capture_output=True, text=True, timeout=60)
        assert ok.returncode == 0 and "Ready" in ok.stdout, ok.stderr
        context = ssl.create_default_context(cafile=str(creds / "ca.crt"))
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(url, timeout=5, context=context)
        assert refused.value.code == 401
        wrong = creds / "wrong"
        wrong.write_text("not the password\n")
        bad = subprocess.run([sys.executable, str(helper), "--user", "prom", "--password-file", str(wrong),
                              "--ca", str(creds / "ca.crt"), url], capture_output=True, text=True, timeout=30)
        assert bad.returncode == 1 and "401" in bad.stderr, bad.stderr
        with pytest.raises(urllib.error.URLError):   # plain HTTP to a TLS port is no answer
            urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=5)
    finally:
        server.terminate()
        server.wait(timeout=30)
