"""Desired state of role ``monitoring``."""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from typing import Any

import yaml

from sparkguard.layout import CONFIG_DIR, LIB_DIR, TEXTFILE_DIR, dropin_path, unit_path
from sparkguard.role import RoleContext, shipped_program
from sparkguard.state import DesiredState, ManagedFile, Service
from sparkguard.templating import render_template, sandbox

from ..base.interface import TRAINING_TARGET  # node-metrics: training mode 0 while it is inactive
from . import web, webhook
from .addresses import alertmanager_target, split_host_port
from .alerts import render_alert_rules
from .cadvisor import disabled_metrics
from .grafana import DATASOURCE_UID, dashboard_json
from .resolve import Resolved, resolve, thresholds
from .settings import MonitoringSettings

NODE_EXPORTER_DEFAULTS = "/etc/default/prometheus-node-exporter"
PROMETHEUS_DEFAULTS = "/etc/default/prometheus"
PROMETHEUS_DROPIN = dropin_path("prometheus.service")
PROMETHEUS_CONFIG = "/etc/prometheus/prometheus.yml"
ALERT_RULES = "/etc/prometheus/sparkguard-alerts.yml"
SITE_RULES = "/etc/prometheus/sparkguard-site-rules.yml"
ALERTMANAGER_DEFAULTS = "/etc/default/prometheus-alertmanager"
ALERTMANAGER_CONFIG = "/etc/prometheus/alertmanager.yml"
NODE_METRICS_SCRIPT = f"{LIB_DIR}/node-metrics"
NODE_METRICS_SERVICE = "sparkguard-node-metrics.service"
NODE_METRICS_TIMER = "sparkguard-node-metrics.timer"
NODE_METRICS_TEXTFILE = f"{TEXTFILE_DIR}/sparkguard_node.prom"
CADVISOR_UNIT = "sparkguard-cadvisor.service"
GRAFANA_DIR = f"{CONFIG_DIR}/grafana"
NODE_METRICS_SOURCE = shipped_program(__file__, "node-metrics.sh")
WEB_GET_SOURCE = shipped_program(__file__, "web-get.py")
GRAFANA_DATASOURCE = f"{GRAFANA_DIR}/provisioning/datasources/sparkguard.yml"
GRAFANA_PROVIDER = f"{GRAFANA_DIR}/provisioning/dashboards/sparkguard.yml"
GRAFANA_DASHBOARD = f"{GRAFANA_DIR}/dashboards/node-memory-truth.json"

HEADER = ("# Managed by sparkguard (role monitoring, roles/monitoring/state.py). Do not edit on the node:\n"
          "# change the inventory and apply again. See docs/roles/monitoring.md.\n")
UNIT_SUFFIXES = "(service|socket|timer|path|target)"
PYTHON_CHECK = "python3 -c \"import ast, sys; ast.parse(open(sys.argv[1]).read())\" {path}"
JSON_CHECK = "! command -v python3 >/dev/null || python3 -m json.tool {path} >/dev/null"
CADVISOR_CHECK = ("command -v docker >/dev/null || { echo 'sparkguard: monitoring.cadvisor is enabled but this node"
                  " has no docker (/usr/bin/docker); install Docker or set monitoring.cadvisor.enabled: false' >&2;"
                  " exit 1; }; systemd-analyze verify {path}")


def _yaml(document: dict[str, Any]) -> str:
    text: str = yaml.safe_dump(document, sort_keys=False, default_flow_style=False, width=120)
    return HEADER + text


def unit_include_regex(patterns: tuple[str, ...]) -> str:
    """node_exporter anchors the regex itself; ``[.]`` instead of ``\\.`` survives every layer of unquoting."""
    return f"({'|'.join(patterns)})[.]{UNIT_SUFFIXES}"


NODE_EXPORTER_UNIT = "prometheus-node-exporter.service"
PROMETHEUS_UNIT = "prometheus.service"
ALERTMANAGER_UNIT = "prometheus-alertmanager.service"


def web_args(unit: str, auth: web.WebAuth) -> list[str]:
    return [f"--web.config.file={web.credential(unit, 'web.yml')}"] if auth.enabled else []


def node_exporter_args(listen: str, settings: MonitoringSettings, auth: web.WebAuth | None = None) -> list[str]:
    return [
        f"--web.listen-address={listen}",
        *web_args(NODE_EXPORTER_UNIT, auth or web.web_auth(settings)),
        f"--collector.textfile.directory={TEXTFILE_DIR}",
        "--collector.systemd",
        f"--collector.systemd.unit-include={unit_include_regex(settings.node_exporter.systemd_units)}",
        "--collector.pressure",
        "--collector.meminfo",
    ]


def prometheus_args(listen: str, settings: MonitoringSettings, auth: web.WebAuth | None = None) -> list[str]:
    return [
        f"--web.listen-address={listen}",
        *web_args(PROMETHEUS_UNIT, auth or web.web_auth(settings)),
        f"--storage.tsdb.retention.time={settings.prometheus.retention_time}",
        f"--storage.tsdb.retention.size={settings.prometheus.retention_size}",
    ]


def prometheus_config(ctx: RoleContext) -> dict[str, Any]:
    settings: MonitoringSettings = ctx.settings("monitoring")
    where = resolve(ctx.config)
    # node_exporter, Prometheus and the local Alertmanager sit behind the same web auth; cAdvisor and
    # vLLM do not (they have no web config), so their jobs stay plain.
    client = web.client_config(web.web_auth(settings))
    # Relative to prometheus.yml's directory, where both live: Prometheus resolves them there on the node, and
    # `promtool check config` resolves them in a render's OUT/<host>/etc/prometheus/ alike.
    rule_files = [posixpath.basename(path) for path in [ALERT_RULES] + ([SITE_RULES] if settings.prometheus.extra_rules
                                                                         else [])]
    config: dict[str, Any] = {
        "global": {
            "scrape_interval": settings.prometheus.scrape_interval,
            "evaluation_interval": settings.prometheus.evaluation_interval,
            "external_labels": {"sparkguard_prometheus": ctx.host},
        },
        "rule_files": rule_files,
    }
    mode = settings.alertmanager.mode
    if mode == "local":
        config["alerting"] = {"alertmanagers": [{**client, "static_configs": [{"targets": [where.alertmanager]}]}]}
    elif mode == "external":
        config["alerting"] = {"alertmanagers": [alertmanager_target(u) for u in settings.alertmanager.external_urls]}
    jobs = [
        {"job_name": "prometheus", **client, "static_configs": [{"targets": [where.prometheus]}]},
        {"job_name": thresholds(ctx.config).node_job, **client,
         "static_configs": [{"targets": list(where.node_targets)}]},
    ]
    if where.cadvisor_targets:
        jobs.append({
            "job_name": "cadvisor",
            "static_configs": [{"targets": list(where.cadvisor_targets)}],
            # Belt and braces: host-network containers report the host NIC as their own traffic.
            "metric_relabel_configs": [{"source_labels": ["__name__"], "regex": "container_network_.*",
                                        "action": "drop"}],
        })
    if settings.prometheus.vllm_targets:
        jobs.append({"job_name": "vllm", "metrics_path": "/metrics",
                     "static_configs": [{"targets": list(settings.prometheus.vllm_targets)}]})
    config["scrape_configs"] = jobs
    return config


def site_rules(settings: MonitoringSettings) -> str:
    rules = [dict(rule) for rule in settings.prometheus.extra_rules]
    return _yaml({"groups": [{"name": "site", "rules": rules}]})


# A secret URL as a render shows it: still a URL amtool accepts, so the review's routing is checkable.
REVIEW_URL = "https://secret.invalid/<secret>"


# Where the webhook URL goes in alertmanager.yml: replaced by the URL as a JSON string (a YAML double-quoted
# scalar), so the URL's text stands there exactly once, in one known encoding, and the Ansible export can put
# `lookup(...) | to_json` in its place (sparkguard.export.ansible.secret_stand_ins).
WEBHOOK_SLOT = "sparkguard-webhook-url-slot"


def alertmanager_yml(settings: MonitoringSettings, review: bool = False) -> str:
    """alertmanager.yml; ``review``: each credential URL as REVIEW_URL (what render shows, never applied).

    A webhook URL read on the operator's machine that is not there (render offline, in CI) shows as REVIEW_URL
    too; apply's preflight refuses to go on without it.
    """
    text = _yaml(alertmanager_config(settings, review))
    if webhook.configured(settings.alertmanager):
        found = None if review else webhook.url(settings.alertmanager)
        text = text.replace(WEBHOOK_SLOT, json.dumps(found or REVIEW_URL), 1)
    return text


def alertmanager_config(settings: MonitoringSettings, review: bool = False) -> dict[str, Any]:
    """alertmanager.yml as data, the webhook URL as WEBHOOK_SLOT (alertmanager_yml puts it in)."""
    am = settings.alertmanager

    def url(value: str) -> str:
        return REVIEW_URL if review else value

    receiver: dict[str, Any] = {"name": "sparkguard"}
    if webhook.configured(am):
        receiver["webhook_configs"] = [{"url": WEBHOOK_SLOT, "send_resolved": True}]
    if am.email_to:
        receiver["email_configs"] = [{"to": am.email_to, "from": am.email_from, "smarthost": am.email_smarthost,
                                      "send_resolved": True}]
    heartbeat: dict[str, Any] = {"name": "heartbeat"}
    if am.heartbeat_url:
        heartbeat["webhook_configs"] = [{"url": url(am.heartbeat_url), "send_resolved": False}]
    return {
        "route": {
            "receiver": "sparkguard",
            "group_by": ["alertname", "instance"],
            "group_wait": am.group_wait,
            "group_interval": "5m",
            "repeat_interval": am.repeat_interval,
            # The always-firing Watchdog goes only to the dead man's switch, every minute, never to people.
            "routes": [{"receiver": "heartbeat", "matchers": ['alertname="Watchdog"'], "group_wait": "0s",
                        "group_interval": "1m", "repeat_interval": "1m"}],
        },
        "inhibit_rules": [{
            # earlyoom is about to act: the warning adds nothing.
            "source_matchers": ['alertname="NodeMemoryAvailableCritical"'],
            "target_matchers": ['alertname="NodeMemoryAvailableLow"'],
            "equal": ["instance"],
        }],
        "receivers": [receiver, heartbeat],
    }


def web_state(auth: web.WebAuth, host: str, settings: MonitoringSettings) -> list[ManagedFile]:
    """The web config, its secrets and each unit's credential drop-in; written before the packages, so the
    first start of every daemon is already behind the auth (root-only files: LoadCredential hands them over)."""
    if not auth.enabled:
        return []

    def secret(path: str, content: str) -> ManagedFile:
        return ManagedFile(path, content, mode="0600", secret=True, before_packages=True)

    files = [ManagedFile(web.WEB_GET, WEB_GET_SOURCE.read_text(), mode="0755",
                         validate=PYTHON_CHECK, before_packages=True),
             secret(web.WEB_CONFIG, web.web_config(auth, host))]
    # The file set follows the settings, not whether the secrets could be read here: a render without
    # them (CI) shows the same files as placeholders, and apply's preflight refuses a missing secret.
    if auth.user:
        files.append(secret(web.PASSWORD, f"{auth.password or ''}\n"))
    if auth.tls:
        files += [ManagedFile(web.CERT, f"{auth.cert or ''}\n", mode="0644", before_packages=True),
                  secret(web.KEY, f"{auth.key or ''}\n"),
                  ManagedFile(web.CA, f"{auth.ca or auth.cert or ''}\n", mode="0644", before_packages=True)]
    units = [NODE_EXPORTER_UNIT]
    if settings.prometheus.enabled:
        units.append(PROMETHEUS_UNIT)
        if settings.alertmanager.mode == "local":
            units.append(ALERTMANAGER_UNIT)
    for unit in units:
        dropin = web.credentials_dropin(auth, password=unit == PROMETHEUS_UNIT)
        files.append(ManagedFile(web.web_dropin_path(unit), dropin, before_packages=True))
    return files


def grafana_files(ctx: RoleContext) -> tuple[ManagedFile, ...]:
    where = resolve(ctx.config)
    source: dict[str, Any] = {
        "name": "sparkguard Prometheus", "type": "prometheus", "uid": DATASOURCE_UID, "access": "proxy",
        "url": where.grafana_url, "isDefault": True, "editable": False,
    }
    auth = web.web_auth(ctx.settings("monitoring"))
    if auth.user:
        # Grafana expands $__env{} when it provisions: the password stays out of this 0644 file.
        source.update(basicAuth=True, basicAuthUser=auth.user)
        source.setdefault("secureJsonData", {})["basicAuthPassword"] = "$__env{SPARKGUARD_PROMETHEUS_PASSWORD}"
    if auth.tls:
        source["jsonData"] = {"tlsAuthWithCACert": True}
        source.setdefault("secureJsonData", {})["tlsCACert"] = f"$__file{{{web.CA}}}"
    datasource = {"apiVersion": 1, "datasources": [source]}
    provider = {"apiVersion": 1, "providers": [{
        "name": "sparkguard", "folder": "sparkguard", "type": "file", "disableDeletion": True,
        "allowUiUpdates": False, "options": {"path": f"{GRAFANA_DIR}/dashboards"},
    }]}
    return (
        ManagedFile(GRAFANA_DATASOURCE, _yaml(datasource)),
        ManagedFile(GRAFANA_PROVIDER, _yaml(provider)),
        ManagedFile(GRAFANA_DASHBOARD, dashboard_json(thresholds(ctx.config)), validate=JSON_CHECK),
    )


@dataclass
class _Part:
    """What one daemon of the stack adds: packages, files, services."""

    packages: list[str] = field(default_factory=list)
    files: list[ManagedFile] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)


def desired_state(ctx: RoleContext) -> DesiredState:
    settings: MonitoringSettings = ctx.settings("monitoring")
    where = resolve(ctx.config)
    auth = web.web_auth(settings)
    web_files = web_state(auth, ctx.host, settings)
    web_paths = tuple(f.path for f in web_files)
    parts = [_Part(files=list(web_files)), _node_exporter(ctx, settings, where, auth, web_paths)]
    if settings.prometheus.enabled:
        parts.append(_prometheus(ctx, settings, where, auth, web_paths))
        if settings.alertmanager.mode == "local":
            parts.append(_alertmanager(settings, where, auth, web_paths))
    if where.cadvisor_enabled:
        parts.append(_cadvisor(settings, where))
    if settings.grafana.enabled:
        parts.append(_Part(files=list(grafana_files(ctx))))
    return DesiredState(
        role="monitoring",
        packages=tuple(p for part in parts for p in part.packages),
        files=tuple(f for part in parts for f in part.files),
        services=tuple(s for part in parts for s in part.services),
    )


def _node_exporter(ctx: RoleContext, settings: MonitoringSettings, where: Resolved, auth: web.WebAuth,
                   web_paths: tuple[str, ...]) -> _Part:
    unified = ctx.node.unified_memory
    return _Part(
        packages=["prometheus-node-exporter"],
        files=[
            ManagedFile(NODE_EXPORTER_DEFAULTS, render_template(
                "monitoring/node-exporter.default.j2", listen=where.node_exporter,
                units_doc=", ".join(settings.node_exporter.systemd_units),
                args=" ".join(node_exporter_args(where.node_exporter, settings, auth))), before_packages=True),
            ManagedFile(NODE_METRICS_SCRIPT, NODE_METRICS_SOURCE.read_text(), mode="0755", validate="sh -n {path}"),
            ManagedFile(unit_path(NODE_METRICS_SERVICE), render_template(
                "monitoring/node-metrics.service.j2", script=NODE_METRICS_SCRIPT, args=" ".join((
                    "--textfile", NODE_METRICS_TEXTFILE, "--training-target", TRAINING_TARGET,
                    "--unified", "auto" if unified is None else str(int(unified)),
                    "--device-profile", ctx.node.device_class,
                    "--swap-allowed", str(int(settings.node_exporter.swap_allowed_during_training)))),
                # nvidia-smi needs the device nodes; /proc of every process is read, only the textfile written.
                sandbox=sandbox((TEXTFILE_DIR,), "CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_SYS_PTRACE", devices=True)),
                validate="systemd-analyze verify {path}"),
            ManagedFile(unit_path(NODE_METRICS_TIMER), render_template(
                "monitoring/node-metrics.timer.j2", interval=settings.node_exporter.metrics_interval_s),
                validate="systemd-analyze verify {path}"),
        ],
        services=[
            Service(NODE_EXPORTER_UNIT, restart_on=(NODE_EXPORTER_DEFAULTS, *web_paths)),
            Service(NODE_METRICS_TIMER, restart_on=(unit_path(NODE_METRICS_TIMER),)),
        ],
    )


def _prometheus(ctx: RoleContext, settings: MonitoringSettings, where: Resolved, auth: web.WebAuth,
                web_paths: tuple[str, ...]) -> _Part:
    host, port = split_host_port(where.prometheus)
    files = [
        ManagedFile(PROMETHEUS_DEFAULTS, render_template(
            "monitoring/prometheus.default.j2", listen=where.prometheus,
            retention_time=settings.prometheus.retention_time, retention_size=settings.prometheus.retention_size,
            args=" ".join(prometheus_args(where.prometheus, settings, auth))), before_packages=True),
        ManagedFile(PROMETHEUS_DROPIN, render_template(
            "monitoring/prometheus-ready.conf.j2", host=host, port=port,
            web_get=web.WEB_GET if auth.enabled else None, url=f"{auth.scheme}://{where.prometheus}",
            web_get_args=web.web_get_args(auth, web.credential(PROMETHEUS_UNIT, "web.password")))),
        # The rules go live before prometheus.yml: Prometheus loads the rule files it names at reload.
        ManagedFile(ALERT_RULES, render_alert_rules(thresholds(ctx.config)), validate="promtool check rules {path}"),
    ]
    reload_on = [PROMETHEUS_CONFIG, ALERT_RULES]
    if settings.prometheus.extra_rules:
        files.append(ManagedFile(SITE_RULES, site_rules(settings), validate="promtool check rules {path}"))
        reload_on.append(SITE_RULES)
    # --syntax-only on the node: the staged copy sits in a stage directory, where its relative rule_files do
    # not resolve; each rules file is checked by its own `promtool check rules` before it replaces the live one.
    files.append(ManagedFile(PROMETHEUS_CONFIG, _yaml(prometheus_config(ctx)),
                             validate="promtool check config --syntax-only {path}"))
    service = Service(PROMETHEUS_UNIT, restart_on=(PROMETHEUS_DEFAULTS, PROMETHEUS_DROPIN, *web_paths),
                      reload_on=tuple(reload_on))
    return _Part(packages=["prometheus"], files=files, services=[service])


def _alertmanager(settings: MonitoringSettings, where: Resolved, auth: web.WebAuth,
                  web_paths: tuple[str, ...]) -> _Part:
    files = [
        ManagedFile(ALERTMANAGER_DEFAULTS, render_template(
            "monitoring/alertmanager.default.j2", listen=where.alertmanager,
            args=" ".join([f"--web.listen-address={where.alertmanager}", "--cluster.listen-address=",
                           *web_args(ALERTMANAGER_UNIT, auth)])), before_packages=True),
        ManagedFile(ALERTMANAGER_CONFIG, alertmanager_yml(settings),
                    validate="amtool check-config {path}", group="prometheus", mode="0640",
                    # A webhook URL (Slack, ntfy) is a credential: render shows <secret> in its place.
                    secret=webhook.configured(settings.alertmanager) or bool(settings.alertmanager.heartbeat_url),
                    review=alertmanager_yml(settings, review=True)),
    ]
    service = Service(ALERTMANAGER_UNIT, restart_on=(ALERTMANAGER_DEFAULTS, ALERTMANAGER_CONFIG, *web_paths))
    return _Part(packages=["prometheus-alertmanager"], files=files, services=[service])


def _cadvisor(settings: MonitoringSettings, where: Resolved) -> _Part:
    host, port = split_host_port(where.cadvisor)
    unit = ManagedFile(unit_path(CADVISOR_UNIT), render_template(
        "monitoring/cadvisor.service.j2", image=settings.cadvisor.image, host=host, port=port,
        housekeeping=settings.cadvisor.housekeeping_interval,
        extra=", ".join(settings.cadvisor.disable_metrics_extra),
        disabled=",".join(disabled_metrics(settings.cadvisor.disable_metrics_extra))),
        validate=CADVISOR_CHECK)
    return _Part(files=[unit], services=[Service(CADVISOR_UNIT, restart_on=(unit_path(CADVISOR_UNIT),))])

