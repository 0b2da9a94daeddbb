"""Synthetic node_exporter histories for ``promtool test rules``.

Each scenario is a set of minute-resolution input series (generated here in
Python, written as explicit value lists) plus the alerts expected at chosen
evaluation times. ``build_test_file`` turns scenarios into a promtool unit-test
file for a rendered rules file; ``measure`` runs promtool with "nothing fires"
expectations at every minute and parses what did fire, which gives the firing
timeline quoted in docs/alerts.md:

    .venv/bin/python -m tests.promtool.scenarios            # incident timeline

Time 0 of the incident replay is 09:48 UTC (training starts). Everything is a
multiple of one minute, like the incident's Prometheus data.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sparkguard.roles.monitoring.alerts import AlertThresholds, duration_seconds, kernel_oom_victims_template, render_alert_rules

ALERTS = (
    "NodeMemoryAvailableLow", "NodeMemoryAvailableCritical", "NodeMemoryExhaustionForecast",
    "NodeSwapActivity", "NodeMemoryPressureStall", "EarlyoomDown", "EarlyoomKilledProcess",
    "KernelOomKilledProcess", "SwapOnDuringTraining", "MemoryOutsideCgroups", "NodeExporterDown",
    "NodeTextfileScrapeError", "SparkguardMetricsStale",
)
MEMORY_ALERTS = ("NodeMemoryAvailableLow", "NodeMemoryAvailableCritical", "NodeMemoryExhaustionForecast")

INSTANCE = "spark-01:9100"
NODE = {"instance": INSTANCE, "job": "node"}
GB = 1e9
PAGE = 4096  # bytes per page for the pswpin/pswpout models (4 KiB kernel)

# The incident, minutes after 09:48 UTC -> MemAvailable bytes (incident-report.en.md).
INCIDENT_MEMTOTAL = 128 * GB
INCIDENT_AVAILABLE = {0: 114 * GB, 15: 54 * GB, 35: 3.5 * GB, 45: 0.3 * GB}
INCIDENT_SWAP_START = 45   # 10:33 swapping begins
INCIDENT_SWAP_USED = {INCIDENT_SWAP_START: 0.0, 50: 9.7 * GB}   # 10:38 swap used 9.7 GB
INCIDENT_LAST_SCRAPE = 79  # 11:07 scraping stops (host hung)


def clock(minute: int) -> str:
    """Minutes after 09:48 as a UTC wall-clock time."""
    h, m = divmod(9 * 60 + 48 + minute, 60)
    return f"{h:02d}:{m:02d}"


def interpolate(points: dict[int, float], end: int) -> list[float]:
    """Values at minutes 0..end, linear between the given points, flat outside them."""
    keys = sorted(points)
    out = []
    for minute in range(end + 1):
        if minute <= keys[0]:
            out.append(points[keys[0]])
        elif minute >= keys[-1]:
            out.append(points[keys[-1]])
        else:
            right = next(k for k in keys if k >= minute)
            left = max(k for k in keys if k <= minute)
            frac = 0 if right == left else (minute - left) / (right - left)
            out.append(points[left] + (points[right] - points[left]) * frac)
    return [float(round(v)) for v in out]


def counter(rates: dict[int, float], end: int, start_value: float = 0.0) -> list[float]:
    """A counter at minutes 0..end whose per-second rate is ``rates[m]`` from minute m on (step function)."""
    keys = sorted(rates)
    value, out = start_value, []
    for minute in range(end + 1):
        out.append(float(round(value, 6)))
        rate = next((rates[k] for k in reversed(keys) if k <= minute), 0.0)
        value += rate * 60
    return out


def selector(name: str, labels: dict[str, str]) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


@dataclass
class Series:
    name: str
    values: list  # float, None (no sample: "_") or "stale"; index = minute
    labels: dict = field(default_factory=lambda: dict(NODE))

    def at(self, minute: int) -> float | None:
        """Sample value an instant query sees at ``minute`` (5m lookback, staleness)."""
        for m in range(minute, max(-1, minute - 5), -1):
            if m < len(self.values):
                v = self.values[m]
                if v == "stale":
                    return None
                if v is not None:
                    return v
        return None

    def promtool(self) -> dict:
        def fmt(v):
            if v is None:
                return "_"
            if v == "stale":
                return "stale"
            return str(int(v)) if float(v).is_integer() and abs(v) < 1e18 else repr(float(v))
        return {"series": selector(self.name, self.labels), "values": " ".join(fmt(v) for v in self.values)}


def stop_after(values: list, last: int) -> list:
    """Keep samples up to minute ``last``, then a staleness marker (the target stopped answering)."""
    return list(values[: last + 1]) + ["stale"]


@dataclass
class Scenario:
    name: str
    series: list[Series]
    end: int                                    # last minute worth evaluating
    # (alertname, minute) -> the alerts expected to be firing, each as its labels without alertname and
    # severity (usually ``NODE``); [] = must not be firing then
    expect: dict = field(default_factory=dict)

    def get(self, name: str, labels: dict | None = None) -> Series | None:
        for s in self.series:
            if s.name == name and (labels is None or s.labels == labels):
                return s
        return None

    def expect_quiet(self, alertnames, minutes) -> None:
        for a in alertnames:
            for m in minutes:
                self.expect[(a, m)] = []


# ---------------------------------------------------------------- scenarios
def written_at(end: int, lag: int = 5) -> list[float]:
    """A textfile timestamp gauge whose writer runs: at minute m it reads ``lag`` seconds before the scrape
    (promtool's clock starts at 0, so time() at minute m is 60 m)."""
    return [float(max(0, 60 * m - lag)) for m in range(end + 1)]


def textfile_series(end: int, labels: dict | None = None) -> list[Series]:
    """sparkguard's textfile writers, healthy: node_exporter parses every file, node-metrics and the GPU ranking
    agent (its unit reported by the systemd collector, active) refresh their timestamps."""
    n = end + 1
    labels = dict(NODE) if labels is None else labels
    return [
        Series("node_textfile_scrape_error", [0.0] * n, dict(labels)),
        Series("sparkguard_node_metrics_timestamp_seconds", written_at(end), dict(labels)),
        Series("sparkguard_gpu_ranking_last_pass_timestamp_seconds", written_at(end, lag=1), dict(labels)),
        Series("node_systemd_unit_state", [1.0] * n,
               {**labels, "name": "sparkguard-gpu-ranking.service", "state": "active"}),
        Series("node_systemd_unit_state", [0.0] * n,
               {**labels, "name": "sparkguard-gpu-ranking.service", "state": "failed"}),
    ]


def healthy_series(end: int, available: list[float], total: float = INCIDENT_MEMTOTAL) -> list[Series]:
    """A well-kept node: exporter up, earlyoom active, no swap, training mode on, no stall, no kernel OOM kill
    since boot, sparkguard's textfile metrics read and fresh."""
    n = end + 1
    return textfile_series(end) + [
        Series("node_memory_MemTotal_bytes", [total] * n),
        Series("node_memory_MemAvailable_bytes", available),
        Series("node_memory_SwapTotal_bytes", [0.0] * n),
        Series("node_memory_SwapFree_bytes", [0.0] * n),
        Series("node_vmstat_pswpin", [0.0] * n),
        Series("node_vmstat_pswpout", [0.0] * n),
        Series("node_pressure_memory_stalled_seconds_total", counter({0: 0.001}, end)),
        Series("node_vmstat_oom_kill", [0.0] * n),
        Series("node_systemd_unit_state", [1.0] * n,
               {**NODE, "name": "earlyoom.service", "state": "active"}),
        Series("node_systemd_unit_state", [0.0] * n,
               {**NODE, "name": "earlyoom.service", "state": "inactive"}),
        Series("sparkguard_training_mode", [1.0] * n),
        Series("up", [1.0] * n),
    ]


def incident(end: int = 110) -> Scenario:
    """The incident as Prometheus saw it, plus the textfile metrics sparkguard would have added.

    Measured (incident report): MemTotal 128 GB; MemAvailable 114 GB at 09:48, 54 GB at 10:03,
    3.5 GB at 10:23, 0.3 GB at 10:33; swap used 9.7 GB at 10:38; scraping stops at 11:07.
    Modelled (not in the report, chosen to be plausible and documented in docs/alerts.md):
    16 GB swap; pswpout 9.7 GB / 5 min from 10:33 then 2000 pages/s, pswpin 1500 pages/s
    from 10:35; PSI full 1-3 % from 10:18, 30 % once swapping starts; no earlyoom installed;
    training mode on; 10 GB of the used memory charged to cgroups (container 7.7 GB + system); no kernel
    OOM kill (the node swapped and hung instead); sparkguard's textfile writers (node-metrics, the GPU ranking
    agent) fresh to the last scrape. After 11:07 the node's series go stale and ``up`` is 0
    (the scrape fails).
    """
    last = INCIDENT_LAST_SCRAPE
    available = interpolate({**INCIDENT_AVAILABLE, last: INCIDENT_AVAILABLE[45]}, last)
    swap_free = interpolate({0: 16 * GB, 45: 16 * GB, 50: 16 * GB - 9.7 * GB, 60: 0.2 * GB}, last)
    pswpout = counter({0: 0, 45: 9.7 * GB / PAGE / 300, 50: 2000}, last)
    pswpin = counter({0: 0, 47: 1500}, last)
    stalled = counter({0: 0.0, 30: 0.01, 35: 0.03, 45: 0.3}, last)
    outside = [max(0.0, INCIDENT_MEMTOTAL - a - 10 * GB) for a in available]
    n = last + 1
    stop = lambda values: stop_after(values, last)  # noqa: E731
    series = [
        Series("node_memory_MemTotal_bytes", stop([INCIDENT_MEMTOTAL] * n)),
        Series("node_memory_MemAvailable_bytes", stop(available)),
        Series("node_memory_SwapTotal_bytes", stop([16 * GB] * n)),
        Series("node_memory_SwapFree_bytes", stop(swap_free)),
        Series("node_vmstat_pswpin", stop(pswpin)),
        Series("node_vmstat_pswpout", stop(pswpout)),
        Series("node_pressure_memory_stalled_seconds_total", stop(stalled)),
        Series("node_vmstat_oom_kill", stop([0.0] * n)),
        Series("sparkguard_training_mode", stop([1.0] * n)),
        Series("sparkguard_memory_outside_cgroups_bytes", stop(outside)),
        Series("up", [1.0] * n + [0.0] * (end - last)),
    ] + [Series(s.name, stop(s.values), s.labels) for s in textfile_series(last)]
    return Scenario("incident replay (time 0 = 09:48 UTC)", series, end)


def plateau(hours: int = 4, with_loading: bool = False) -> Scenario:
    """Steady 54 GB available for hours (optionally after the 114 -> 54 GB model load)."""
    end = hours * 60
    points = {0: 114 * GB, 15: 54 * GB} if with_loading else {0: 54 * GB}
    return Scenario(f"54 GB plateau for {hours} h" + (" after loading" if with_loading else ""),
                    healthy_series(end, interpolate(points, end)), end)


def sawtooth(high: float = 0.40, low: float = 0.25, down: int = 8, up: int = 2, cycles: int = 12,
             lead: int = 15) -> Scenario:
    """Page-cache sawtooth: MemAvailable slides from ``high`` to ``low`` (fractions of MemTotal) over
    ``down`` minutes, recovers in ``up`` minutes, again and again; no trend toward the SIGTERM line.
    The first ``lead`` minutes sit at ``high`` so that the first slide has a history before it, as
    every slide after it does."""
    points, minute = {0: high * INCIDENT_MEMTOTAL}, lead
    for _ in range(cycles):
        points[minute] = high * INCIDENT_MEMTOTAL
        points[minute + down] = low * INCIDENT_MEMTOTAL
        minute += down + up
    points[minute] = high * INCIDENT_MEMTOTAL
    return Scenario(f"sawtooth {high:.0%} -> {low:.0%} in {down}m, back in {up}m",
                    healthy_series(minute, interpolate(points, minute)), minute)


def spike(depth: float, start: int = 60, length: int = 2, base: float = 0.40, end: int = 120) -> Scenario:
    """Steady ``base`` of MemTotal with a ``length``-minute dip to ``depth`` (fractions) at ``start``."""
    available = [base * INCIDENT_MEMTOTAL] * (end + 1)
    for m in range(start, start + length):
        available[m] = depth * INCIDENT_MEMTOTAL
    return Scenario(f"{length}-minute dip to {depth:.1%} at minute {start}",
                    healthy_series(end, [float(round(v)) for v in available]), end)


# ---------------------------------------------------------------- promtool file
class Annotator:
    """Expands the rules' annotation templates the way Prometheus does, for exact exp_annotations.

    Only the constructs the rules use are supported; anything else is an error, so a new
    construct in the rules shows up here instead of as a confusing promtool diff.
    """

    def __init__(self, rules_text: str, thresholds: AlertThresholds):
        doc = yaml.safe_load(rules_text)
        self.rules = {r["alert"]: r for g in doc["groups"] for r in g["rules"]}
        self.t = thresholds
        # KernelOomKilledProcess names its victims with a query in the template: the test computes the
        # expected names (``kernel_oom_victims``) and puts them where the whole construct stands.
        self.victims_block = kernel_oom_victims_template(thresholds)

    @staticmethod
    def _humanize1024(v: float) -> str:
        if abs(v) <= 1 or math.isnan(v) or math.isinf(v):
            return f"{v:.4g}"
        prefix = ""
        for p in ("ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"):
            if abs(v) < 1024:
                break
            prefix, v = p, v / 1024
        return f"{v:.4g}{prefix}"

    def expand(self, text: str, labels: dict, value: float | None, victims: str | None = None) -> str:
        if victims is not None:
            text = text.replace(self.victims_block, victims)

        def sub(match: re.Match) -> str:
            body = match.group(1).strip()
            if m := re.fullmatch(r"\$labels\.(\w+)", body):
                return labels.get(m.group(1), "")
            if body == '$value | printf "%.1f"':
                return f"{value:.1f}"
            if body == "$value | humanize1024":
                return self._humanize1024(value)
            raise AssertionError(f"annotation construct not supported by the test: {{{{ {body} }}}}")
        return re.sub(r"\{\{(.*?)\}\}", sub, text)

    def annotations(self, alertname: str, labels: dict, value: float | None, victims: str | None = None) -> dict:
        return {k: self.expand(v, labels, value, victims) for k, v in self.rules[alertname]["annotations"].items()}

    def labels(self, alertname: str, extra: dict) -> dict:
        return {**extra, **self.rules[alertname]["labels"]}


def alert_value(scenario: Scenario, alertname: str, labels: dict, minute: int) -> float | None:
    """$value of the alerts whose annotations quote it, computed as PromQL would."""
    if alertname in ("NodeMemoryAvailableLow", "NodeMemoryAvailableCritical"):
        avail = scenario.get("node_memory_MemAvailable_bytes").at(minute)
        total = scenario.get("node_memory_MemTotal_bytes").at(minute)
        return 100 * avail / total
    if alertname == "MemoryOutsideCgroups":
        return scenario.get("sparkguard_memory_outside_cgroups_bytes").at(minute)
    return None


def kernel_oom_victims(scenario: Scenario, thresholds: AlertThresholds, labels: dict, minute: int) -> str:
    """What KernelOomKilledProcess's victim query expands to at ``minute``, computed as Prometheus would:
    the instance's last-kill gauges with a kill inside the window, sorted by victim (``sortByLabel``)."""
    window = duration_seconds(thresholds.kernel_oom_kill_window)
    found = []
    for s in scenario.series:
        if (s.name == thresholds.kernel_oom_last_kill_metric and s.labels.get("instance") == labels.get("instance")
                and s.labels.get("job") == thresholds.node_job):
            value = s.at(minute)
            if value is not None and value > minute * 60 - window:
                found.append(s.labels)
    names = [f"{v['victim']}{' (memory cgroup limit)' if v.get('scope') == 'cgroup' else ''}"
             for v in sorted(found, key=lambda v: v["victim"].encode())]
    return ", ".join(names) or "a process"


def fmt_minutes(minute: int) -> str:
    return f"{minute}m"


def build_test_file(rules_path: Path, scenarios: list[Scenario], thresholds: AlertThresholds,
                    rules_text: str) -> dict:
    """A promtool unit-test document: one test group per scenario, exact exp_alerts."""
    annotator = Annotator(rules_text, thresholds)
    tests = []
    for sc in scenarios:
        cases = []
        for (alertname, minute), expected in sorted(sc.expect.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            exp = []
            for labels in expected:
                value = alert_value(sc, alertname, labels, minute)
                victims = (kernel_oom_victims(sc, thresholds, labels, minute)
                           if alertname == "KernelOomKilledProcess" else None)
                exp.append({"exp_labels": annotator.labels(alertname, labels),
                            "exp_annotations": annotator.annotations(alertname, labels, value, victims)})
            cases.append({"eval_time": fmt_minutes(minute), "alertname": alertname, "exp_alerts": exp})
        tests.append({"name": sc.name, "interval": "1m",
                      "input_series": [s.promtool() for s in sc.series], "alert_rule_test": cases})
    return {"rule_files": [str(rules_path)], "evaluation_interval": "1m", "tests": tests}


def promtool_binary() -> str | None:
    return shutil.which("promtool")


def run_promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([promtool_binary() or "promtool", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


_FAILURE = re.compile(r"alertname: (\w+), time: ([0-9hms]+),")
_LABELS = re.compile(r"Labels:\{(.*?)\}")


def parse_got(output: str) -> dict[tuple[str, int], list[dict]]:
    """From promtool's failure report: (alertname, minute) -> labels of the alerts that fired."""
    got: dict[tuple[str, int], list[dict]] = {}
    current = None
    for line in output.splitlines():
        if m := _FAILURE.search(line):
            current = (m.group(1), duration_seconds(m.group(2)) // 60)
            got[current] = []
        elif current and (m := _LABELS.search(line)):
            got[current].append(dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(1))))
    return got


def measure(scenario: Scenario, thresholds: AlertThresholds | None = None,
            alertnames=ALERTS) -> dict[str, list[int]]:
    """Minutes at which each alert is firing, by asking promtool "nothing fires?" every minute."""
    thresholds = thresholds or AlertThresholds()
    text = render_alert_rules(thresholds)
    probe = Scenario(scenario.name, scenario.series, scenario.end)
    probe.expect_quiet(alertnames, range(scenario.end + 1))
    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "rules.yml"
        rules.write_text(text)
        test = Path(tmp) / "test.yml"
        test.write_text(yaml.safe_dump(build_test_file(rules, [probe], thresholds, text), sort_keys=False))
        result = run_promtool("test", "rules", str(test))
    got = parse_got(result.stdout + result.stderr)
    if result.returncode and not got:
        raise RuntimeError(result.stdout + result.stderr)
    return {a: sorted(m for (name, m), alerts in got.items() if name == a and alerts) for a in alertnames}


def spans(minutes: list[int]) -> list[tuple[int, int]]:
    """[3, 4, 5, 9] -> [(3, 5), (9, 9)]"""
    out: list[tuple[int, int]] = []
    for m in minutes:
        if out and out[-1][1] == m - 1:
            out[-1] = (out[-1][0], m)
        else:
            out.append((m, m))
    return out


def timeline(scenario: Scenario, thresholds: AlertThresholds | None = None, wall_clock: bool = False) -> str:
    fired = measure(scenario, thresholds)
    show: Callable[[int], str] = (lambda m: f"{m}m ({clock(m)})") if wall_clock else (lambda m: f"{m}m")
    lines = [f"# {scenario.name}"]
    for alert, minutes in fired.items():
        text = ", ".join(f"{show(a)}-{show(b)}" for a, b in spans(minutes)) or "never"
        lines.append(f"{alert:30s} {text}")
    return "\n".join(lines)


if __name__ == "__main__":
    which = sys.argv[1:] or ["incident"]
    for name in which:
        if name == "incident":
            print(timeline(incident(), wall_clock=True))
        elif name == "plateau":
            print(timeline(plateau(4, with_loading=True)))
        elif name == "sawtooth":
            print(timeline(sawtooth()))
        elif name == "spike":
            print(timeline(spike(0.12)))
            print(timeline(spike(0.09)))
