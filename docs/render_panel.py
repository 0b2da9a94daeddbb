"""Render the "node memory truth" panel for the incident timeline as docs/img/node-memory-truth.png.

No Grafana exists in Debian (and none runs here), so this draws the dashboard's
main panel from the same data the promtool incident replay uses
(tests/promtool/scenarios.py) and the same lines the alert rules use
(roles/monitoring/alerts.py defaults): MemAvailable against earlyoom's lines, the
30-minute predict_linear forecast, swap, and what the container dashboard showed.

    .venv/bin/pip install matplotlib   # a docs tool, not a sparkguard dependency
    .venv/bin/python docs/render_panel.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from sparkguard.roles.monitoring.alerts import AlertThresholds  # noqa: E402
from tests.promtool.scenarios import (  # noqa: E402
    GB,
    INCIDENT_AVAILABLE,
    INCIDENT_LAST_SCRAPE,
    INCIDENT_MEMTOTAL,
    INCIDENT_SWAP_USED,
    clock,
    interpolate,
)

t = AlertThresholds()
end = INCIDENT_LAST_SCRAPE
minutes = list(range(end + 1))
available = [v / GB for v in interpolate(INCIDENT_AVAILABLE, end)]
swap = [v / GB for v in interpolate(INCIDENT_SWAP_USED, end)]
total = INCIDENT_MEMTOTAL / GB
lookback, horizon = 10, 30


def forecast(i: int) -> float:
    """predict_linear(MemAvailable[10m], 30m): least squares over the last 10 samples, 30 min ahead."""
    xs = minutes[max(0, i - lookback):i + 1]
    ys = available[max(0, i - lookback):i + 1]
    if len(xs) < 2:
        return ys[-1]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my + slope * (xs[-1] + horizon - mx)


fig, ax = plt.subplots(figsize=(11, 5.2), dpi=110)
ax.plot(minutes, available, color="#1f77b4", lw=2.4, label="node MemAvailable (node_exporter)")
ax.fill_between(minutes, 0, total, where=[forecast(i) < total * t.term_percent / 100 and available[i] < total / 2
                                          for i in minutes], color="#1f77b4", alpha=0.08, step="mid",
                label="forecast below the SIGTERM line within 30 min (predict_linear)")
ax.plot(minutes[45:], swap[45:], color="#9467bd", lw=1.8, label="swap used")
ax.plot(minutes, [7.7] * len(minutes), color="#2ca02c", lw=1.6, ls="--",
        label="container_memory_working_set_bytes (what the old dashboard showed)")
for percent, name, color in ((t.warn_percent, "NodeMemoryAvailableLow", "#bcbd22"),
                             (t.critical_percent, "NodeMemoryAvailableCritical", "#ff7f0e"),
                             (t.term_percent, "earlyoom SIGTERM", "#d62728"),
                             (t.kill_percent, "earlyoom SIGKILL", "#8c0000")):
    ax.axhline(total * percent / 100, color=color, lw=1, ls="--")
    ax.text(end + 0.5, total * percent / 100, f" {name} {percent:g}%", va="center", fontsize=8, color=color)
for minute, text in ((23, "forecast alert fires (10:11)"), (34, "critical fires (10:22)"), (end, "host hung (11:07)")):
    ax.axvline(minute, color="grey", lw=0.8, ls="-.")
    ax.text(minute, total * 0.55, text, rotation=90, va="top", ha="right", fontsize=8, color="grey")
ax.set_xlim(0, end + 1)
ax.set_ylim(0, total)
ax.set_xticks(range(0, end + 1, 10), [clock(m) for m in range(0, end + 1, 10)])
ax.set_ylabel("GB")
ax.set_title("sparkguard \"node memory truth\": the incident (DGX Spark, 128 GB unified memory)")
ax.legend(loc="center right", bbox_to_anchor=(0.99, 0.62), fontsize=8, framealpha=0.95)
fig.subplots_adjust(right=0.8)
out = Path(__file__).resolve().parent / "img" / "node-memory-truth.png"
fig.savefig(out)
print(out)
