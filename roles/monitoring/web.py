"""Basic auth and TLS in front of node_exporter, Prometheus and Alertmanager.

All three read one exporter-toolkit web config (``--web.config.file``). Its files are written
root-only (0600) before the packages install, when the ``prometheus`` user and group do not exist
yet, and each service receives them through systemd ``LoadCredential=`` in
``/run/credentials/UNIT/``: readable by that service alone. The web config names its certificate
and key RELATIVELY, since exporter-toolkit resolves them against the config file's own directory,
so one file serves all three units. Prometheus scrapes (and alerts) with the same user, reading
the password from its own credential.
"""

from __future__ import annotations

import base64
import hashlib
from dataclasses import dataclass
from typing import Any

import bcrypt
import yaml

from sparkguard.inventory.secrets import read_secret
from sparkguard.layout import CONFIG_DIR, LIB_DIR, dropin_path

from .settings import MonitoringSettings

WEB_DIR = f"{CONFIG_DIR}/web"
WEB_CONFIG = f"{WEB_DIR}/web.yml"
PASSWORD = f"{WEB_DIR}/password"
CERT = f"{WEB_DIR}/tls.crt"
KEY = f"{WEB_DIR}/tls.key"
CA = f"{WEB_DIR}/ca.crt"
DROPIN = "sparkguard-web.conf"
WEB_GET = f"{LIB_DIR}/web-get"
# bcrypt cost: exporter-toolkit checks the hash on every request it has not cached; 10 keeps a
# scrape's first check near 50 ms on an arm64 core.
BCRYPT_COST = 10
_BCRYPT_ALPHABET = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
                                 "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")


@dataclass(frozen=True)
class WebAuth:
    """What the inventory asked for, with the secrets read from the operator's machine."""

    user: str | None
    password: str | None
    cert: str | None
    key: str | None
    ca: str | None

    tls_wanted: bool = False

    @property
    def enabled(self) -> bool:
        return bool(self.user or self.tls)

    @property
    def tls(self) -> bool:
        return self.tls_wanted

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"


def read_pem(path: str | None, kind: str, field: str) -> str | None:
    """A PEM file from the operator's machine, through sparkguard.inventory.operator_files: a certificate file holds
    CERTIFICATE blocks only (never a key: it goes out as 0644), a key file one private key only."""
    return read_secret(None, path, kind, f"monitoring.web.{field}") if path else None


def web_auth(settings: MonitoringSettings) -> WebAuth:
    web = settings.web
    password = (read_secret(web.basic_auth_password_env, web.basic_auth_password_file, "secret",
                            "monitoring.web.basic_auth_password_file") if web.basic_auth_user else None)
    cert = read_pem(web.tls_cert_file, "certificate", "tls_cert_file")
    return WebAuth(user=web.basic_auth_user, password=password, cert=cert,
                   key=read_pem(web.tls_key_file, "private-key", "tls_key_file"),
                   ca=read_pem(web.tls_ca_file, "certificate", "tls_ca_file") or cert, tls_wanted=bool(web.tls_cert_file))


def password_hash(password: str, host: str, user: str) -> str:
    """bcrypt with a salt derived from host, user and password: the same inputs render the same file,
    so a second apply changes nothing, while no two hosts or users share a salt."""
    seed = hashlib.sha256(f"sparkguard-web\0{host}\0{user}\0{password}".encode()).digest()[:16]
    salt = base64.b64encode(seed).decode().rstrip("=").translate(_BCRYPT_ALPHABET)[:22]
    return bcrypt.hashpw(password.encode(), f"$2b${BCRYPT_COST:02d}${salt}".encode()).decode()


def web_config(auth: WebAuth, host: str) -> str:
    document: dict[str, Any] = {}
    if auth.tls:
        document["tls_server_config"] = {"cert_file": "tls.crt", "key_file": "tls.key", "min_version": "TLS12"}
    if auth.user:
        document["basic_auth_users"] = {auth.user: password_hash(auth.password or "", host, auth.user)}
    text: str = yaml.safe_dump(document, sort_keys=False)
    return text


def credentials_dropin(auth: WebAuth, password: bool) -> str:
    """LoadCredential lines: systemd (as root) copies the 0600 files into the unit's own credential dir."""
    lines = ["# Managed by sparkguard (role monitoring): the web config and its files, readable by this unit only.",
             "[Service]", f"LoadCredential=web.yml:{WEB_CONFIG}"]
    if auth.tls:
        lines += [f"LoadCredential=tls.crt:{CERT}", f"LoadCredential=tls.key:{KEY}"]
    if password and auth.user:
        lines.append(f"LoadCredential=web.password:{PASSWORD}")
    return "\n".join(lines) + "\n"


def credential(unit: str, name: str) -> str:
    return f"/run/credentials/{unit}/{name}"


def client_config(auth: WebAuth, unit: str = "prometheus.service") -> dict[str, Any]:
    """How Prometheus reaches a target or an Alertmanager behind this auth (scrape/alerting config keys)."""
    config: dict[str, Any] = {}
    if auth.tls:
        config["scheme"] = "https"
        config["tls_config"] = {"ca_file": CA}
    if auth.user:
        config["basic_auth"] = {"username": auth.user, "password_file": credential(unit, "web.password")}
    return config


def web_get_args(auth: WebAuth, password_file: str) -> str:
    """web-get's options for these endpoints (the values are Word/fixed paths: no quoting needed)."""
    words = []
    if auth.user:
        words += ["--user", auth.user, "--password-file", password_file]
    if auth.tls:
        words += ["--ca", CA]
    return " ".join(words)


def web_dropin_path(unit: str) -> str:
    return dropin_path(unit, DROPIN)
