"""Defaults of role ``monitoring``: every variable, in one place.

Node-level memory truth (node_exporter + sparkguard's textfile metrics), a
Prometheus with alert rules rendered from the SAME numbers as earlyoom, a
corrected cAdvisor, Grafana provisioning and an Alertmanager. Every listen
address defaults to the node's own management address (``ssh_host``), never
to all interfaces.
"""

from __future__ import annotations

from typing import Any, Literal

from sparkguard.settings import ByteSize, Duration, ImageRef, Settings, UnitPattern, Word, setting


class NodeExporterSettings(Settings):
    """node_exporter (Debian package prometheus-node-exporter) and the node metrics textfile."""

    listen_address: str = setting(
        "", "HOST:PORT node_exporter listens on. Empty = the node's ssh_host on port 9100 (its management"
        " interface). Never defaults to all interfaces.")
    systemd_units: tuple[UnitPattern, ...] = setting(
        ("earlyoom", "nohang", "ssh", "prometheus.*", "sparkguard-.*"),
        "Unit name patterns (RE2, without the .service/.timer/... suffix) the systemd collector reports."
        " EarlyoomDown reads the guard's unit (earlyoom.service or nohang.service) from it; everything else would be"
        " thousands of useless series.")
    metrics_interval_s: int = setting(
        15, "How often sparkguard-node-metrics.timer rewrites sparkguard_node.prom (training mode, memory"
        " outside cgroups, per-process GPU memory).", unit="s", ge=5, le=3600)
    swap_allowed_during_training: bool = setting(
        False, "Exported as sparkguard_swap_allowed_during_training. true = this node may keep swap on while"
        " training (SwapOnDuringTraining stays quiet). The incident says no.")


class PrometheusSettings(Settings):
    """Prometheus (Debian package prometheus) on this node, with sparkguard's rules."""

    enabled: bool = setting(
        True, "Install Prometheus on this node. false = only node_exporter here; point another node's"
        " prometheus.node_targets at it (a Prometheus on the node it watches dies with it: NodeExporterDown"
        " can only fire from elsewhere).")
    listen_address: str = setting("", "HOST:PORT of Prometheus' web/API. Empty = the node's ssh_host on port 9090.")
    scrape_interval: Duration = setting(
        "15s", "Scrape interval (Prometheus duration). The alert rules' rate() windows assume <= 1m.")
    evaluation_interval: Duration = setting("15s", "Rule evaluation interval (Prometheus duration).")
    retention_time: Duration = setting(
        "30d", "--storage.tsdb.retention.time: keep samples this long (an incident is read days later).")
    retention_size: ByteSize = setting(
        "10GB", "--storage.tsdb.retention.size: cap on the TSDB (B, KB, MB, GB, TB); the oldest blocks go first.")
    node_targets: tuple[str, ...] = setting(
        (), "HOST:PORT node_exporters to scrape (job node). Empty = this node's own node_exporter.")
    cadvisor_targets: tuple[str, ...] = setting(
        (), "HOST:PORT cAdvisors to scrape (job cadvisor). Empty = this node's cAdvisor when cadvisor is enabled.")
    vllm_targets: tuple[str, ...] = setting(
        (), "HOST:PORT of each vLLM server; /metrics is scraped (job vllm) for KV-cache usage and queueing.")
    extra_rules: tuple[dict[str, Any], ...] = setting(
        (), "Site rules (Prometheus rule objects: alert/record, expr, for, labels, annotations) in group"
        " 'site', file /etc/prometheus/sparkguard-site-rules.yml; checked by `promtool check rules` on the node"
        " before they go live.")


class AlertSettings(Settings):
    """The alert rules (alerts.py, docs/alerts.md): earlyoom's lines plus these overrides."""

    overrides: dict[str, Any] = setting(
        lambda: {}, "AlertThresholds fields to override (docs/alerts.md), e.g. {warn_percent: 20, forecast_for: 5m}."
        " term_percent/kill_percent are not allowed: they always come from the earlyoom settings.")


class CadvisorSettings(Settings):
    """cAdvisor, corrected: no network metrics (host-network containers report the host NIC), no labels."""

    enabled: bool | None = setting(
        None, "Run cAdvisor (docker container as a systemd unit). Empty = on when node.device_profile is"
        " dgx-spark (DGX OS ships Docker), off otherwise. Needs /usr/bin/docker on the node: the unit refuses"
        " to install without it.")
    image: ImageRef = setting("ghcr.io/google/cadvisor:v0.53.0", "Pinned cAdvisor image (ghcr.io from v0.53 on).",
                         min_length=1)
    listen_address: str = setting("", "HOST:PORT cAdvisor listens on (host network). Empty = the node's ssh_host"
                                  " on port 8080.")
    housekeeping_interval: Duration = setting(
        "10s", "--housekeeping_interval (upstream default 1s costs a core on a busy node).")
    disable_metrics_extra: tuple[Word, ...] = setting(
        ("network", "tcp", "udp", "advtcp"),
        "Metric sets disabled on top of cAdvisor's own defaults (the flag REPLACES the default list, so"
        " sparkguard repeats it). network: host-network containers would all report the host NIC's totals.")


class AlertmanagerSettings(Settings):
    """Where alerts go. A rule nobody receives did not fire."""

    mode: Literal["local", "external", "none"] = setting(
        "local", "local = Alertmanager (Debian package prometheus-alertmanager) on this node with the receiver"
        " below; external = send to external_urls; none = rules only (the Prometheus UI shows them).")
    listen_address: str = setting("", "HOST:PORT of the local Alertmanager. Empty = the node's ssh_host on port"
                                  " 9093. Clustering is off.")
    external_urls: tuple[str, ...] = setting(
        (), "Alertmanager base URLs (http(s)://host:port[/prefix]) for mode external. Credentials in a URL"
        " (user:password@) are refused.")
    webhook_url: str = setting("", "Webhook receiver URL (Slack/Matrix bridge, ntfy, PagerDuty events...). A credential:"
                               " only alertmanager.yml (0640) holds it; node.json, renders and errors show <secret>."
                               " Better kept out of the inventory: webhook_url_env or webhook_url_file.",
                               secret=True)
    webhook_url_env: Word | None = setting(
        None, "Environment variable ON THE OPERATOR'S MACHINE holding the webhook URL (instead of webhook_url): the"
        " inventory holds no credential, and the Ansible export looks it up on the controller.")
    webhook_url_file: str | None = setting(
        None, "File ON THE OPERATOR'S MACHINE holding the webhook URL (absolute or ~ path; instead of webhook_url).",
        min_length=1, operator_file="secret")
    heartbeat_url: str = setting(
        "", "Dead man's switch: webhook that receives the always-firing Watchdog alert every minute (e.g. a"
        " healthchecks.io ping URL, or a peer's receiver). When the pings stop, the node or its alerting is down."
        " Empty = Watchdog stays in Alertmanager, unsent. A credential: shown as <secret>.", secret=True)
    email_to: str = setting("", "Email receiver address (needs email_from and email_smarthost).")
    email_from: str = setting("", "Sender address for email notifications.")
    email_smarthost: str = setting("", "SMTP relay HOST:PORT for email notifications.")
    group_wait: Duration = setting("30s", "How long to wait to batch the first notification of a group.")
    repeat_interval: Duration = setting("4h", "Resend a still-firing alert this often.")


class GrafanaSettings(Settings):
    """Grafana file provisioning (Grafana itself is not in Debian; install it your way)."""

    enabled: bool = setting(True, "Render the datasource, dashboard provider and the 'node memory truth'"
                            " dashboard under /etc/sparkguard/grafana (point Grafana's provisioning there).")
    prometheus_url: str = setting("", "Datasource URL (http(s)://...). Empty = http://<prometheus.listen_address>."
                                  " Credentials in the URL (user:password@) are refused: the datasource gets"
                                  " monitoring.web's user, its password through Grafana's environment.")


class WebSettings(Settings):
    """Basic auth and TLS for node_exporter, Prometheus and Alertmanager (one --web.config.file for all three).

    Every value here names a place ON THE OPERATOR'S MACHINE; the secrets themselves never enter the
    inventory. All nodes Prometheus scrapes (peers included) must share the user and password.
    """

    basic_auth_user: Word | None = setting(
        None, "User name clients (Prometheus, Grafana, you) must send. Empty = no basic auth.")
    basic_auth_password_env: Word | None = setting(
        None, "Environment variable ON THE OPERATOR'S MACHINE holding that user's password.")
    basic_auth_password_file: str | None = setting(
        None, "File ON THE OPERATOR'S MACHINE holding that user's password (absolute or ~ path).", min_length=1,
        operator_file="secret")
    tls_cert_file: str | None = setting(
        None, "PEM certificate of this node ON THE OPERATOR'S MACHINE (its address in subjectAltName; set it per"
        " host in host_vars). Empty = plain HTTP.", min_length=1, operator_file="certificate")
    tls_key_file: str | None = setting(
        None, "PEM private key of that certificate ON THE OPERATOR'S MACHINE (a secret: 0600 on the node).",
        min_length=1, operator_file="private-key")
    tls_ca_file: str | None = setting(
        None, "PEM CA certificate(s) ON THE OPERATOR'S MACHINE that signed every scraped node's certificate;"
        " Prometheus verifies its targets with it. Empty = tls_cert_file itself (one self-signed certificate"
        " for the whole fleet).", min_length=1, operator_file="certificate")


class MonitoringSettings(Settings):
    """Node memory truth: node_exporter, Prometheus + rules, corrected cAdvisor, Grafana, Alertmanager."""

    enabled: bool = setting(
        False, "Install the monitoring stack. Off by default: it installs daemons and opens ports, so an"
               " operator turns it on per group, with a receiver for the alerts.")
    allow_all_interfaces: bool = setting(
        False, "Allow a listen_address of 0.0.0.0 or [::] (every interface, including a public one). node_exporter,"
        " Prometheus and Alertmanager answer anyone who reaches them unless monitoring.web sets basic auth (cAdvisor"
        " never has any), and anyone who reaches Alertmanager can silence its alerts: bind them to the"
        " management address, or opt in explicitly with true.")
    watched_externally: bool = setting(
        False, "A Prometheus outside this inventory (a central one) scrapes this node's node_exporter. Without it"
        " (or a peer in this inventory listing the node in prometheus.node_targets), validate and apply advise"
        " that a hang of this node cannot page: a node's own Prometheus dies with it.")
    web: WebSettings = setting(lambda: WebSettings(), "Basic auth and TLS of the three web endpoints.")
    node_exporter: NodeExporterSettings = setting(lambda: NodeExporterSettings(), "node_exporter and the textfile.")
    prometheus: PrometheusSettings = setting(lambda: PrometheusSettings(), "Prometheus.")
    alerts: AlertSettings = setting(lambda: AlertSettings(), "Alert rule overrides.")
    cadvisor: CadvisorSettings = setting(lambda: CadvisorSettings(), "cAdvisor.")
    alertmanager: AlertmanagerSettings = setting(lambda: AlertmanagerSettings(), "Alertmanager.")
    grafana: GrafanaSettings = setting(lambda: GrafanaSettings(), "Grafana provisioning.")
