"""Settings -> the concrete addresses, targets and thresholds the files are rendered from.

Shared by state.py (render/apply) and checks.py (validation), so what is checked is
exactly what is rendered.
"""

from __future__ import annotations

from dataclasses import dataclass

from sparkguard.hostconfig import HostConfig, settings_of

from ..earlyoom.settings import EarlyoomSettings
from .addresses import default_address
from .alerts import AlertThresholds
from .settings import MonitoringSettings

NODE_EXPORTER_PORT = 9100
PROMETHEUS_PORT = 9090
CADVISOR_PORT = 8080
ALERTMANAGER_PORT = 9093

# Set from the earlyoom settings, never from the inventory's monitoring block.
EARLYOOM_FIELDS = ("term_percent", "kill_percent")


@dataclass(frozen=True)
class Resolved:
    node_exporter: str
    prometheus: str
    cadvisor: str
    alertmanager: str
    cadvisor_enabled: bool
    node_targets: tuple[str, ...]
    cadvisor_targets: tuple[str, ...]
    grafana_url: str


def resolve(config: HostConfig) -> Resolved:
    settings: MonitoringSettings = config.monitoring
    ssh_host = config.ssh_host

    def pick(value: str, port: int) -> str:
        return value or default_address(ssh_host, port)

    node_exporter = pick(settings.node_exporter.listen_address, NODE_EXPORTER_PORT)
    prometheus = pick(settings.prometheus.listen_address, PROMETHEUS_PORT)
    cadvisor = pick(settings.cadvisor.listen_address, CADVISOR_PORT)
    alertmanager = pick(settings.alertmanager.listen_address, ALERTMANAGER_PORT)
    cadvisor_enabled = settings.cadvisor.enabled
    if cadvisor_enabled is None:
        cadvisor_enabled = config.node.device_profile == "dgx-spark"
    cadvisor_targets = settings.prometheus.cadvisor_targets or ((cadvisor,) if cadvisor_enabled else ())
    return Resolved(
        node_exporter=node_exporter,
        prometheus=prometheus,
        cadvisor=cadvisor,
        alertmanager=alertmanager,
        cadvisor_enabled=bool(cadvisor_enabled),
        node_targets=settings.prometheus.node_targets or (node_exporter,),
        cadvisor_targets=cadvisor_targets,
        grafana_url=settings.grafana.prometheus_url or f"{'https' if settings.web.tls_cert_file else 'http'}://{prometheus}",
    )


def thresholds(config: HostConfig) -> AlertThresholds:
    """The alert thresholds: earlyoom's lines plus the monitoring overrides (may raise ValueError/TypeError)."""
    overrides = {k: v for k, v in config.monitoring.alerts.overrides.items()}
    return AlertThresholds.from_earlyoom(settings_of(config, EarlyoomSettings), **overrides)
