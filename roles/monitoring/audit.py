"""How `sparkguard audit` judges role monitoring: the exporter answers, Prometheus has its rules, cAdvisor's
network metrics are off. Behind monitoring.web it asks through the node's own web-get with the root-only password."""

from __future__ import annotations

from sparkguard.audit.checks import AuditView, Check, q
from sparkguard.hostconfig import HostConfig

from . import web
from .resolve import resolve

PLAIN_GET = ("python3 -c 'import sys,urllib.request as u; "
             "print(u.urlopen(sys.argv[1], timeout=3).read().decode())' ")


def probe(config: HostConfig) -> list[str]:
    where = resolve(config)
    auth = web.web_auth(config.monitoring)
    scheme = f"{auth.scheme}://"
    get = f"{web.WEB_GET} {web.web_get_args(auth, web.PASSWORD)} " if auth.enabled else PLAIN_GET
    lines = [f"r node_exporter_up \"$({get}{q(scheme + where.node_exporter + '/metrics')} 2>/dev/null "
             f"| grep -c '^node_' )\""]
    if config.monitoring.prometheus.enabled:
        lines.append(f"r prometheus_rules \"$({get}{q(scheme + where.prometheus + '/api/v1/rules')} "
                     f"2>/dev/null | grep -o '\"type\":\"alerting\"' | wc -l)\"")
    if where.cadvisor_enabled:
        lines.append("r cadvisor_exec \"$(systemctl show -p ExecStart --value sparkguard-cadvisor.service)\"")
    return lines


def _count(value: str) -> int:
    return int(value) if value.isdigit() else 0


def checks(view: AuditView) -> list[Check]:
    rt = view.runtime
    up = _count(rt.get("node_exporter_up", "0"))
    found = [Check("monitoring: node_exporter up", up > 0, "serving node_* metrics",
                   f"{up} node_* samples" if up else "not answering")]
    if "prometheus_rules" in rt:
        rules = _count(rt["prometheus_rules"])
        found.append(Check("monitoring: Prometheus rules loaded", rules > 0, "alert rules loaded",
                           f"{rules} alerting rules" if rules else "Prometheus not answering or no rules"))
    if "cadvisor_exec" in rt:
        cmd = rt["cadvisor_exec"]
        ok = "disable_metrics" in cmd and "network" in cmd.split("disable_metrics", 1)[1].split()[0]
        found.append(Check("monitoring: cAdvisor network metrics off", ok, "--disable_metrics includes network",
                           "network disabled" if ok else (cmd[:100] or "unit not found")))
    return found
