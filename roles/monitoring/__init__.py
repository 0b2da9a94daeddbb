"""Role ``monitoring``: node-level memory truth, corrected cAdvisor, alerts from earlyoom's lines."""

from sparkguard.role import Role

from . import audit
from .checks import preflight, problems
from .settings import MonitoringSettings
from .state import desired_state
from .watchers import unwatched

ROLE = Role(
    name="monitoring",
    settings=MonitoringSettings,
    desired_state=desired_state,
    summary="node_exporter + node memory textfile, Prometheus with alerts on earlyoom's lines, corrected cAdvisor,"
            " Grafana provisioning, Alertmanager",
    checks=problems,
    preflight=preflight,
    fleet_advice=unwatched,
    audit_probe=audit.probe,
    audit_checks=audit.checks,
    reads=("earlyoom", "base"),  # the alert lines are earlyoom's; node-metrics follows base's training target
)
