"""Grafana file provisioning: a datasource with a fixed uid, a dashboard provider, and
the "node memory truth" dashboard. No ``${DS_...}`` inputs: every panel names the
datasource by uid, so the JSON loads through file provisioning as it is.
"""

from __future__ import annotations

import json
from typing import Any

from .alerts import AlertThresholds

DATASOURCE_UID = "sparkguard-prometheus"
DASHBOARD_UID = "sparkguard-node-memory-truth"
DS = {"type": "prometheus", "uid": DATASOURCE_UID}


def _target(expr: str, legend: str, ref: str) -> dict[str, Any]:
    return {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref}


def _panel(pid: int, title: str, targets: list[tuple[str, str]], unit: str, x: int, y: int,
           description: str, w: int = 12, h: int = 8) -> dict[str, Any]:
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DS,
        "gridPos": {"h": h, "w": w, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [_target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(targets)],
    }


def dashboard(t: AlertThresholds) -> dict[str, Any]:
    job = f'job="{t.node_job}",instance=~"$instance"'
    avail = f"node_memory_MemAvailable_bytes{{{job}}}"
    total = f"node_memory_MemTotal_bytes{{{job}}}"

    def line(percent: float) -> str:
        return f"{total} * {percent:g} / 100"

    panels = [
        _panel(1, "MemAvailable against the earlyoom lines", [
            (avail, "MemAvailable {{instance}}"),
            (line(t.warn_percent), f"warning {t.warn_percent:g}%"),
            (line(t.critical_percent), f"critical {t.critical_percent:g}%"),
            (line(t.term_percent), f"earlyoom SIGTERM {t.term_percent:g}%"),
            (line(t.kill_percent), f"earlyoom SIGKILL {t.kill_percent:g}%"),
        ], "bytes", 0, 0, "On a unified-memory node this IS the GPU's memory. Container metrics cannot see it.",
            w=24, h=10),
        _panel(2, f"Forecast: MemAvailable in {t.forecast_window}", [
            (f"predict_linear({avail}[{t.forecast_lookback}], {t.forecast_seconds})", "forecast {{instance}}"),
            (line(t.term_percent), "earlyoom SIGTERM line"),
        ], "bytes", 0, 10, "NodeMemoryExhaustionForecast fires when this stays below the SIGTERM line."),
        _panel(3, "Memory pressure (PSI)", [
            (f"rate(node_pressure_memory_stalled_seconds_total{{{job}}}[{t.psi_window}])", "full {{instance}}"),
            (f"rate(node_pressure_memory_waiting_seconds_total{{{job}}}[{t.psi_window}])", "some {{instance}}"),
        ], "percentunit", 12, 10, "Share of time tasks were stalled on memory."),
        _panel(4, "Swap in / out", [
            (f"rate(node_vmstat_pswpin{{{job}}}[{t.swap_rate_window}])", "in {{instance}}"),
            (f"rate(node_vmstat_pswpout{{{job}}}[{t.swap_rate_window}])", "out {{instance}}"),
        ], "ops", 0, 18, "Pages per second. Swapping on a unified-memory node is how the incident's hang began."),
        _panel(5, "Used memory outside every cgroup", [
            (f"{t.outside_cgroups_metric}{{{job}}}", "outside cgroups {{instance}}"),
            (f"{total} - {avail}", "used (MemTotal - MemAvailable) {{instance}}"),
        ], "bytes", 12, 18, "GPU driver memory: docker --memory, MemoryMax= and container_memory_* do not see it."),
        _panel(6, "earlyoom kills", [
            (f"increase({t.earlyoom_kills_metric}{{{job}}}[1h])", "{{victim}} {{instance}}"),
            (f"sparkguard_earlyoom_kills_all_total{{{job}}}", "all victims (total) {{instance}}"),
        ], "short", 0, 26, "Kills in the last hour per victim, and the running total."),
        _panel(7, "Training mode and swap", [
            (f"{t.training_mode_metric}{{{job}}}", "training mode {{instance}}"),
            (f"node_memory_SwapTotal_bytes{{{job}}} > bool 0", "swap on {{instance}}"),
        ], "short", 12, 26, "Swap must be off while training (SwapOnDuringTraining)."),
        _panel(8, "vLLM KV-cache usage", [
            ('vllm:kv_cache_usage_perc or vllm:gpu_cache_usage_perc', "{{instance}} {{model_name}}"),
        ], "percentunit", 0, 34, "Fraction of vLLM's KV cache in use (the metric was renamed in newer vLLM)."),
        _panel(9, "GPU memory per process (nvidia-smi)", [
            (f"sparkguard_gpu_process_memory_bytes{{{job}}}", "{{process}} ({{pid}}) {{instance}}"),
        ], "bytes", 12, 34, "From nvidia-smi --query-compute-apps; on GB10 this is host RAM too."),
    ]
    return {
        "uid": DASHBOARD_UID,
        "title": "Node memory truth",
        "tags": ["sparkguard", "memory"],
        "description": "Node-level memory on unified-memory GPU nodes: MemAvailable is the GPU memory signal.",
        "editable": False,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {"list": [{
            "name": "instance",
            "type": "query",
            "datasource": DS,
            "query": {"query": f'label_values(node_memory_MemTotal_bytes{{job="{t.node_job}"}}, instance)',
                      "refId": "instance"},
            "definition": f'label_values(node_memory_MemTotal_bytes{{job="{t.node_job}"}}, instance)',
            "includeAll": True,
            "multi": True,
            "current": {"selected": True, "text": "All", "value": "$__all"},
            "refresh": 2,
        }]},
        "panels": panels,
    }


def dashboard_json(t: AlertThresholds) -> str:
    return json.dumps(dashboard(t), indent=2, sort_keys=True) + "\n"
