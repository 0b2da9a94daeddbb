"""Cross-field checks of role ``monitoring`` (run by validate, render and apply; exit 2)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

from sparkguard.errors import Problem, redact_userinfo, url_has_credentials
from sparkguard.facts import NodeInfo
from sparkguard.hostconfig import HostConfig

from . import webhook
from .addresses import alertmanager_target, check_url, default_address, split_host_port
from .alerts import AlertThresholds, duration_seconds
from .cadvisor import VALID_METRICS, unknown_metrics
from .resolve import EARLYOOM_FIELDS, thresholds
from .settings import AlertmanagerSettings, MonitoringSettings, WebSettings

_SIZE = re.compile(r"^[0-9]+(B|KB|MB|GB|TB|PB|EB)$")
_IMAGE = re.compile(r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+(:[A-Za-z0-9._-]+|@sha256:[0-9a-f]{64})$")
_UNIT_PATTERN = re.compile(r"^[A-Za-z0-9@_.*+?\-\[\]]+$")
# The listen addresses that mean "every interface".
WILDCARDS = frozenset({"0.0.0.0", "::"})
_EMAIL = re.compile(r"^[^@\s\"']+@[^@\s\"']+$")


def problems(config: HostConfig) -> Iterator[Problem]:
    settings: MonitoringSettings = config.monitoring
    yield from _addresses(config)
    for field in ("prometheus.scrape_interval", "prometheus.evaluation_interval", "prometheus.retention_time",
                  "cadvisor.housekeeping_interval", "alertmanager.group_wait", "alertmanager.repeat_interval"):
        value = _get(settings, field)
        try:
            if duration_seconds(value) <= 0:
                raise ValueError("must be longer than 0s")
        except ValueError as error:
            yield Problem("", f"monitoring.{field}", value, f"{error} (a Prometheus duration like 15s, 5m, 30d)")
    if not _SIZE.match(settings.prometheus.retention_size):
        yield Problem("", "monitoring.prometheus.retention_size", settings.prometheus.retention_size,
                      "a size like 10GB or 512MB (units B, KB, MB, GB, TB, PB, EB)")
    for index, pattern in enumerate(settings.node_exporter.systemd_units):
        if not _UNIT_PATTERN.match(pattern):
            yield Problem("", f"monitoring.node_exporter.systemd_units[{index}]", pattern,
                          "a unit name pattern without the suffix (letters, digits, @_.-*+?[]; no | ( ) or spaces)")
    for index, name in enumerate(settings.cadvisor.disable_metrics_extra):
        if name in unknown_metrics((name,)):
            yield Problem("", f"monitoring.cadvisor.disable_metrics_extra[{index}]", name,
                          f"cAdvisor would refuse to start (unknown metric set); valid: {', '.join(VALID_METRICS)}")
    if not _IMAGE.match(settings.cadvisor.image):
        yield Problem("", "monitoring.cadvisor.image", settings.cadvisor.image,
                      "a pinned image reference REGISTRY/NAME:TAG or @sha256:DIGEST (no 'latest' surprises: pin it)")
    elif settings.cadvisor.image.endswith(":latest"):
        yield Problem("", "monitoring.cadvisor.image", settings.cadvisor.image, "pin a release tag, not latest")
    for index, rule in enumerate(settings.prometheus.extra_rules):
        reason = _rule_problem(rule)
        if reason:
            yield Problem("", f"monitoring.prometheus.extra_rules[{index}]", rule, reason)
    yield from _alerting(settings)
    yield from _web(settings.web)
    yield from _thresholds(config)


def _get(settings: MonitoringSettings, dotted: str) -> Any:
    value: Any = settings
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def _addresses(config: HostConfig) -> Iterator[Problem]:
    settings: MonitoringSettings = config.monitoring
    for block in ("node_exporter", "prometheus", "cadvisor", "alertmanager"):
        value = getattr(settings, block).listen_address
        shown = value or default_address(config.ssh_host, 1)
        try:
            host, _ = split_host_port(value or shown)
            if host in WILDCARDS and not settings.allow_all_interfaces:
                yield Problem("", f"monitoring.{block}.listen_address", value,
                              "listens on every interface, where anyone who reaches the port reads the metrics (and,"
                              " for Alertmanager, silences the alerts): name the node's management address, e.g."
                              " 192.0.2.11:9100, or set monitoring.allow_all_interfaces: true to opt in")
        except ValueError as error:
            where = "" if value else " (from ssh_host, since listen_address is empty; set it explicitly)"
            yield Problem("", f"monitoring.{block}.listen_address", value, f"{error}{where}; expected HOST:PORT,"
                          f" e.g. 192.0.2.11:9100")
    for field in ("node_targets", "cadvisor_targets", "vllm_targets"):
        for index, target in enumerate(getattr(settings.prometheus, field)):
            try:
                split_host_port(target)
            except ValueError as error:
                yield Problem("", f"monitoring.prometheus.{field}[{index}]", target,
                              f"{error}; a scrape target is HOST:PORT, e.g. 192.0.2.11:8000")


def _rule_problem(rule: dict[str, Any]) -> str | None:
    kinds = [k for k in ("alert", "record") if k in rule]
    if len(kinds) != 1:
        return "a rule needs exactly one of 'alert' or 'record'"
    if not isinstance(rule.get("expr"), str) or not rule["expr"].strip():
        return "a rule needs an 'expr' (PromQL text); promtool checks it on the node"
    allowed = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}
    extra = sorted(set(rule) - allowed)
    if extra:
        return f"unknown keys {extra}; allowed: {sorted(allowed)}"
    if "for" in rule:
        try:
            duration_seconds(str(rule["for"]))
        except ValueError as error:
            return str(error)
    return None


def _alerting(settings: MonitoringSettings) -> Iterator[Problem]:
    am = settings.alertmanager
    given = webhook.sources(am)
    if len(given) > 1:
        yield Problem("", given[1][0], given[1][1], "set one of webhook_url, webhook_url_env and webhook_url_file;"
                      f" {given[0][0]} is set too")
    if am.webhook_url_file and not am.webhook_url_file.startswith(("/", "~")):
        yield Problem("", f"{webhook.FIELD}_file", am.webhook_url_file,
                      "must be an absolute or ~ path on the operator's machine")
    if am.webhook_url:
        try:
            check_url(am.webhook_url)
        except ValueError as error:
            yield Problem("", "monitoring.alertmanager.webhook_url", "<secret>",
                          f"{error} (the URL is a credential: not repeated here)")
    if am.heartbeat_url:
        try:
            check_url(am.heartbeat_url)
        except ValueError as error:
            yield Problem("", "monitoring.alertmanager.heartbeat_url", "<secret>",
                          f"{error} (the URL is a credential: not repeated here)")
    if am.email_to or am.email_from or am.email_smarthost:
        for field in ("email_to", "email_from"):
            if not _EMAIL.match(getattr(am, field)):
                yield Problem("", f"monitoring.alertmanager.{field}", getattr(am, field),
                              "email needs email_to, email_from (addresses) and email_smarthost (HOST:PORT)")
        try:
            split_host_port(am.email_smarthost)
        except ValueError as error:
            yield Problem("", "monitoring.alertmanager.email_smarthost", am.email_smarthost, f"{error}; HOST:PORT")
    if am.mode == "local" and settings.prometheus.enabled and not (webhook.configured(am) or am.email_to):
        yield Problem("", "monitoring.alertmanager.mode", am.mode,
                      "a local Alertmanager needs a receiver: set monitoring.alertmanager.webhook_url_env (or"
                      " webhook_url_file, webhook_url) or email_to"
                      " (or mode: external with external_urls, or mode: none to keep the rules in Prometheus only)")
    if am.mode == "external" and not am.external_urls:
        yield Problem("", "monitoring.alertmanager.external_urls", am.external_urls,
                      "mode external needs at least one Alertmanager URL, e.g. http://alertmanager.example:9093")
    for index, url in enumerate(am.external_urls):
        if url_has_credentials(url):
            continue  # refused for every URL setting when the inventory loads (sparkguard.settings), shown redacted
        try:
            alertmanager_target(url)
        except ValueError as error:
            yield Problem("", f"monitoring.alertmanager.external_urls[{index}]", redact_userinfo(url), str(error))
    grafana_url = settings.grafana.prometheus_url
    if grafana_url and not url_has_credentials(grafana_url):
        try:
            check_url(grafana_url)
        except ValueError as error:
            yield Problem("", "monitoring.grafana.prometheus_url", redact_userinfo(grafana_url),
                          f"{error}, e.g. https://192.0.2.11:9090")


def _thresholds(config: HostConfig) -> Iterator[Problem]:
    overrides: dict[str, Any] = config.monitoring.alerts.overrides
    known = {f.name for f in dataclasses.fields(AlertThresholds)}
    bad = False
    for key in overrides:
        if key in EARLYOOM_FIELDS:
            bad = True
            yield Problem("", f"monitoring.alerts.overrides.{key}", overrides[key],
                          f"the earlyoom lines come from earlyoom.{key}; set it there, so alerts and earlyoom agree")
        elif key not in known:
            bad = True
            yield Problem("", f"monitoring.alerts.overrides.{key}", overrides[key],
                          f"not an alert threshold; known: {', '.join(sorted(known - set(EARLYOOM_FIELDS)))}")
    if bad:
        return
    try:
        thresholds(config)
    except (TypeError, ValueError) as error:
        yield Problem("", "monitoring.alerts.overrides", dict(overrides), str(error))


def _web(web_settings: WebSettings) -> Iterator[Problem]:
    """Which web-auth settings belong together; the secrets themselves are read on apply (preflight)."""
    prefix = "monitoring.web."
    user, env, file = (web_settings.basic_auth_user, web_settings.basic_auth_password_env,
                       web_settings.basic_auth_password_file)
    if user and bool(env) == bool(file):
        yield Problem("", prefix + "basic_auth_user", user, "set exactly one of basic_auth_password_env and"
                      " basic_auth_password_file (where the password lies on the operator's machine)")
    if not user and (env or file):
        field = "basic_auth_password_env" if env else "basic_auth_password_file"
        yield Problem("", prefix + field, env or file, "a password without basic_auth_user: set the user too")
    cert, key, ca = web_settings.tls_cert_file, web_settings.tls_key_file, web_settings.tls_ca_file
    if bool(cert) != bool(key):
        field, value = ("tls_key_file", key) if not cert else ("tls_cert_file", cert)
        yield Problem("", prefix + field, value, "tls_cert_file and tls_key_file go together (set both or neither)")
    if ca and not cert:
        yield Problem("", prefix + "tls_ca_file", ca, "a CA without tls_cert_file: the endpoints would stay plain HTTP")
    for field in ("basic_auth_password_file", "tls_cert_file", "tls_key_file", "tls_ca_file"):
        value = getattr(web_settings, field)
        if value and not value.startswith(("/", "~")):
            yield Problem("", prefix + field, value, "must be an absolute or ~ path on the operator's machine")


def _webhook_preflight(am: AlertmanagerSettings) -> Iterator[Problem]:
    """A webhook URL read on the operator's machine is there and well formed (never repeated: a credential)."""
    if not (am.webhook_url_env or am.webhook_url_file) or am.mode != "local":
        return
    field, shown = webhook.sources(am)[0]
    found = webhook.url(am)
    if not found:
        yield Problem("", field, shown, f"no webhook URL in the {webhook.where(am)} on this machine; export it or"
                      " fix the setting")
        return
    try:
        check_url(found)
    except ValueError as error:
        yield Problem("", field, shown, f"the URL in the {webhook.where(am)}: {error} (a credential: not repeated here)")


def preflight(config: HostConfig, info: NodeInfo) -> Iterator[Problem]:
    """On apply only: the web-auth secrets and PEM files are there, on the operator's machine, and usable."""
    from sparkguard.inventory.secrets import source_words

    from .web import web_auth

    yield from _webhook_preflight(config.monitoring.alertmanager)
    web_settings: WebSettings = config.monitoring.web
    auth = web_auth(config.monitoring)
    if auth.user:
        source = source_words(web_settings.basic_auth_password_env, web_settings.basic_auth_password_file)
        field = "monitoring.web.basic_auth_password_" + ("env" if web_settings.basic_auth_password_env else "file")
        shown = web_settings.basic_auth_password_env or web_settings.basic_auth_password_file
        if not auth.password:
            yield Problem("", field, shown, f"no password in the {source} on this machine; export it or fix the setting")
        elif any(c in auth.password for c in "\n\r\0"):
            yield Problem("", field, "<secret>", f"the password in the {source} spans lines; use one line")
    # What the files hold was checked when the inventory loaded (sparkguard.inventory.operator_files, on every command):
    # here only that they are there to be read.
    for field, text, what in (("tls_cert_file", auth.cert, "PEM certificate"), ("tls_key_file", auth.key, "PEM private key"),
                              ("tls_ca_file", auth.ca if web_settings.tls_ca_file else "-", "PEM CA certificate")):
        path = getattr(web_settings, field)
        if path and not text:
            yield Problem("", f"monitoring.web.{field}", path, f"no readable {what} file there on this machine")
