"""Prometheus alert rules rendered from the same numbers as earlyoom.

The memory lines in the rules are not typed twice: ``term_percent`` and
``kill_percent`` are earlyoom's ``-m TERM,KILL`` (percent of MemTotal, the
earlyoom 1.7 formula), and every memory alert is placed relative to them. Change
earlyoom's line and the alerts move with it, so the dashboard can never say
"fine" while earlyoom is about to kill, or the other way round.

Only node-level signals are used (``node_memory_*``, ``node_vmstat_*``, PSI,
textfile metrics written on the node). ``container_memory_*`` is never used for
node health: on unified-memory machines the GPU driver's allocations are not
charged to any cgroup, so containers look small while the host runs dry (the
incident: container working set 7.7 GB, host 110 GB used).

``render_alert_rules(AlertThresholds())`` is a pure function: same thresholds,
same bytes. ``docs/alerts.md`` explains each alert and the incident timeline the
defaults were checked against (``tests/unit/test_alert_rules.py`` replays it
with ``promtool test rules``).
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from sparkguard.layout import TEXTFILE_DIR
from sparkguard.templating import render_template

from ..earlyoom.settings import EarlyoomSettings

TEMPLATE = "monitoring/alert-rules.yml.j2"


def go(action: str) -> str:
    """One action of the Go templates Prometheus expands in annotations: ``go("$labels.instance")`` is
    ``{{ $labels.instance }}``. Written through this, the rules' f-strings need no doubled braces."""
    return "{{ " + action + " }}"


INSTANCE = go("$labels.instance")
UNIT = go("$labels.unit")
VALUE_PCT = go('$value | printf "%.1f"')

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_UNIT_NAME = re.compile(r"^[a-zA-Z0-9:_.@-]+\.(?:service|timer)$")


def duration_seconds(text: str) -> int:
    """Seconds in a Prometheus duration such as ``30m``, ``1h30m`` or ``90s``."""
    match = _DURATION.match(text)
    if not text or not match or not any(match.groups()):
        raise ValueError(f"not a Prometheus duration (like 30m, 1h, 90s): {text!r}")
    days, hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def _num(value: float) -> str:
    """A number as PromQL text: ``1000`` not ``1000.0``, ``0.05`` stays ``0.05``, no exponent for integers."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


@dataclass(frozen=True)
class AlertThresholds:
    """Every number and name the alert rules use, with defaults from the incident.

    Percentages are of MemTotal, as earlyoom 1.7 computes them
    (MemAvailable / MemTotal). Durations are Prometheus durations (``5m``).
    """

    # --- the earlyoom lines (take these from the earlyoom settings) ---
    term_percent: float = 8.0
    """earlyoom SIGTERM line (``-m TERM,KILL``): MemAvailable at or below this % of MemTotal gets a process SIGTERMed."""
    kill_percent: float = 4.0
    """earlyoom SIGKILL line, % of MemTotal. Only quoted in annotations; nothing alerts on it separately."""

    # --- NodeMemoryAvailableLow (warning) ---
    warn_percent: float = 15.0
    """NodeMemoryAvailableLow fires when MemAvailable stays below this % of MemTotal for ``warn_for``."""
    warn_for: str = "5m"
    """How long MemAvailable must stay below the warning line before NodeMemoryAvailableLow fires."""

    # --- NodeMemoryAvailableCritical ---
    critical_margin_percent: float = 2.0
    """NodeMemoryAvailableCritical fires when MemAvailable is within this many points above the SIGTERM line
    (default 8 + 2: below 10 % of MemTotal), i.e. earlyoom is about to kill."""
    critical_for: str = "2m"
    """How long MemAvailable must stay below the critical line (two scrapes at 1m; a 2-minute dip stays pending)."""

    # --- NodeMemoryExhaustionForecast ---
    forecast_window: str = "30m"
    """predict_linear horizon: fire when MemAvailable is projected to reach the SIGTERM line within this time."""
    forecast_lookback: str = "10m"
    """Range the linear fit is computed over (``node_memory_MemAvailable_bytes[10m]``)."""
    forecast_for: str = "10m"
    """How long the projection must keep saying "line within ``forecast_window``". Longer than a
    page-cache swing or a short allocation burst, short enough to fire ~10 minutes before earlyoom
    in the incident (see docs/alerts.md)."""
    forecast_below_percent: float = 50.0
    """Only forecast while MemAvailable is already below this % of MemTotal. Keeps the forecast quiet
    while a model loads into an otherwise empty node; 100 disables the guard."""

    # --- NodeSwapActivity ---
    swap_activity_rate: float = 1000.0
    """Pages per second swapped in + out (node_vmstat_pswpin + pswpout) above which NodeSwapActivity fires.
    1000 pages/s is ~4 MB/s with 4 KiB pages, ~64 MB/s with 64 KiB pages."""
    swap_rate_window: str = "5m"
    """rate() window for the swap counters."""
    swap_for: str = "2m"
    """How long swap traffic must stay above ``swap_activity_rate``."""

    # --- NodeMemoryPressureStall ---
    psi_full_threshold: float = 0.05
    """PSI memory "full": fraction of wall time in which all non-idle tasks were stalled on memory
    (rate of node_pressure_memory_stalled_seconds_total). 0.05 = 5 % of the time."""
    psi_window: str = "5m"
    """rate() window for the PSI counter."""
    psi_for: str = "2m"
    """How long the stall fraction must stay above ``psi_full_threshold``."""

    # --- EarlyoomDown / EarlyoomKilledProcess: the low-memory guard, earlyoom or nohang ---
    # One metric contract for both guards (roles/earlyoom/guard.py): the alert names stay, the
    # unit state is either guard's, and both guards' kills land in the same counters.
    guard_units: str = "earlyoom.service|nohang.service"
    """systemd units (an RE2 alternation) of which one must have ``node_systemd_unit_state{state="active"}`` 1."""
    earlyoom_down_for: str = "5m"
    """How long the guard may be inactive (or its unit state missing) before EarlyoomDown fires."""
    earlyoom_kills_metric: str = "sparkguard_earlyoom_kills_total"
    """Textfile counter incremented by the guard's hook on each kill (one series per victim)."""
    earlyoom_kills_all_metric: str = "sparkguard_earlyoom_kills_all_total"
    """Counter of all kills on the node; it exists from 0, so increase() also sees a node's first kill."""
    earlyoom_victim_label: str = "victim"
    """Label of ``earlyoom_kills_metric`` that names the killed process (its comm)."""
    earlyoom_kill_window: str = "10m"
    """EarlyoomKilledProcess stays firing this long after a kill (increase() window)."""

    # --- KernelOomKilledProcess: the kernel's own OOM killer, whatever the memory gauges say ---
    kernel_oom_kill_window: str = "10m"
    """KernelOomKilledProcess fires while ``node_vmstat_oom_kill`` rose within this window (increase() range)."""
    kernel_oom_for: str = "1m"
    """How long before it pages: long enough for the node-metrics textfile (every 15 s) to carry the victim's
    name into the first notification's annotation; shorter than ``kernel_oom_kill_window``."""
    kernel_oom_last_kill_metric: str = "sparkguard_kernel_oom_last_kill_timestamp_seconds"
    """Textfile gauge (node-metrics, from the kernel log): when the kernel last OOM-killed a process of that
    name, one series per ``victim`` (comm) and ``scope`` (node / cgroup). The annotation lists the victims
    killed within ``kernel_oom_kill_window``."""

    # --- SwapOnDuringTraining ---
    training_mode_metric: str = "sparkguard_training_mode"
    """Textfile gauge, 1 while the node is in training mode (swap must be off), 0 otherwise."""
    swap_policy_metric: str = "sparkguard_swap_allowed_during_training"
    """Textfile gauge; 1 on a node whose operator decided swap may stay on while training. Absent or 0:
    swap must be off, and SwapOnDuringTraining fires if it is not."""
    swap_on_training_for: str = "2m"
    """How long training mode and swap may coexist before SwapOnDuringTraining fires."""

    # --- MemoryOutsideCgroups (informational) ---
    outside_cgroups_metric: str = "sparkguard_memory_outside_cgroups_bytes"
    """Textfile gauge: host used memory (MemTotal - MemAvailable) minus what memory cgroups account for,
    i.e. mostly GPU-driver memory that no container limit can stop."""
    memory_outside_cgroups_bytes: int = 16 * 1024**3
    """MemoryOutsideCgroups fires (severity info) above this many bytes outside all cgroups."""
    outside_cgroups_for: str = "15m"
    """How long the outside-cgroup memory must stay above the threshold."""

    # --- NodeExporterDown ---
    exporter_down_for: str = "3m"
    """How long up{job=...} may be 0 (or absent) before NodeExporterDown fires. A hung unified-memory
    node shows up exactly like this: the last memory samples, then nothing."""
    exporter_sample_max_age_s: int = 120
    """An ``up`` sample older than this is a target Prometheus no longer scrapes, not a down one: a live
    target gets a fresh ``up`` (0 or 1) every scrape. Without it, a target dropped by a restart (the
    package's own ``localhost:9100`` before sparkguard's config replaced it, measured on the incident VM)
    keeps its last ``up 0`` visible for Prometheus' 5-minute lookback and pages NodeExporterDown on a
    healthy node. Keep it above twice the scrape interval."""

    # --- NodeTextfileScrapeError: sparkguard's textfile metrics are not being read ---
    textfile_error_for: str = "3m"
    """How long node_exporter may report ``node_textfile_scrape_error`` 1 before NodeTextfileScrapeError fires.
    sparkguard's writers replace their files atomically, so a parse error is not a passing state: it lasts
    until the bad line is gone (a GPU process name, a hand-made .prom file)."""

    # --- SparkguardMetricsStale: a textfile writer stopped ---
    gpu_ranking_timestamp_metric: str = "sparkguard_gpu_ranking_last_pass_timestamp_seconds"
    """Textfile gauge the GPU ranking agent writes on every pass (every ``gpu_ranking_interval_s``, 2 s)."""
    gpu_ranking_unit: str = "sparkguard-gpu-ranking.service"
    """The agent's systemd unit. A node whose systemd collector reports it runs the agent (earlyoom.gpu_ranking),
    so a missing timestamp there is stale too; a node without the unit is not asked for one."""
    gpu_ranking_stale_after: str = "5m"
    """SparkguardMetricsStale fires when the agent's last pass is older than this (150 of its 2 s passes)."""
    node_metrics_timestamp_metric: str = "sparkguard_node_metrics_timestamp_seconds"
    """Textfile gauge node-metrics writes on every run (sparkguard-node-metrics.timer, every
    ``monitoring.node_exporter.metrics_interval_s``, 15 s)."""
    node_metrics_unit: str = "sparkguard-node-metrics.service"
    """node-metrics' systemd unit (started by its timer); named in the alert's ``unit`` label."""
    node_metrics_stale_after: str = "5m"
    """SparkguardMetricsStale fires when node-metrics' timestamp is older than this. Keep it well above
    ``metrics_interval_s`` (20 runs at the default 15 s); raise it if that interval is raised past 2 minutes."""
    metrics_stale_for: str = "2m"
    """How long a timestamp must stay too old (or missing where its writer should run) before
    SparkguardMetricsStale fires; also the grace a freshly booted node has to write its first one."""

    # --- names ---
    node_job: str = "node"
    """Prometheus job name of the node exporters (the textfile metrics come through the same job)."""
    group_name: str = "sparkguard-node-memory"
    """Name of the rule group in the rendered file."""

    def __post_init__(self) -> None:
        problems = []
        if not 0 < self.kill_percent < self.term_percent < 100:
            problems.append(f"need 0 < kill_percent ({self.kill_percent}) < term_percent ({self.term_percent}) < 100")
        if not self.critical_margin_percent > 0:
            problems.append(f"critical_margin_percent must be > 0, got {self.critical_margin_percent}")
        if not self.term_percent + self.critical_margin_percent <= self.warn_percent < 100:
            problems.append(
                f"need term_percent + critical_margin_percent ({self.critical_percent:g}) <= warn_percent "
                f"({self.warn_percent}) < 100: the warning must come before the critical alert")
        if not self.term_percent < self.forecast_below_percent <= 100:
            problems.append(f"forecast_below_percent must be in (term_percent, 100], got {self.forecast_below_percent}")
        for name in ("swap_activity_rate", "memory_outside_cgroups_bytes"):
            if not getattr(self, name) > 0:
                problems.append(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0 < self.psi_full_threshold < 1:
            problems.append(f"psi_full_threshold is a fraction of time, in (0, 1); got {self.psi_full_threshold}")
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name.endswith(("_for", "_window", "_lookback", "_after")):
                try:
                    seconds = duration_seconds(value)
                except (TypeError, ValueError) as error:
                    problems.append(f"{field.name}: {error}")
                    continue
                if field.name.endswith("_after") and seconds <= 0:
                    problems.append(f"{field.name}: must be longer than 0, got {value!r}")
            elif field.name.endswith("_metric") and not _METRIC_NAME.match(str(value)):
                problems.append(f"{field.name}: not a metric name: {value!r}")
        try:
            if duration_seconds(self.kernel_oom_for) >= duration_seconds(self.kernel_oom_kill_window):
                problems.append(f"kernel_oom_for ({self.kernel_oom_for}) must be shorter than kernel_oom_kill_window "
                                f"({self.kernel_oom_kill_window}), or KernelOomKilledProcess never fires")
        except (TypeError, ValueError):
            pass  # reported above
        if not _LABEL_NAME.match(self.earlyoom_victim_label):
            problems.append(f"earlyoom_victim_label: not a label name: {self.earlyoom_victim_label!r}")
        for name in ("node_job", "guard_units", "group_name"):
            value = getattr(self, name)
            if not value or any(c in value for c in '"\\\n{}'):
                problems.append(f"{name}: empty or contains quotes, braces or backslashes: {value!r}")
        for name in ("gpu_ranking_unit", "node_metrics_unit"):
            # a label value in label_replace (where $ would expand) and a selector's name="..."
            if not _UNIT_NAME.match(getattr(self, name)):
                problems.append(f"{name}: not a systemd unit name: {getattr(self, name)!r}")
        if problems:
            raise ValueError("invalid alert thresholds: " + "; ".join(problems))

    @classmethod
    def from_earlyoom(cls, earlyoom: EarlyoomSettings, **overrides: object) -> AlertThresholds:
        """Thresholds whose lines are earlyoom's (role monitoring reads role earlyoom's settings), so alerts
        and earlyoom cannot disagree."""
        return cls(term_percent=float(earlyoom.term_percent), kill_percent=float(earlyoom.kill_percent),
                   **overrides)  # type: ignore[arg-type]

    @property
    def critical_percent(self) -> float:
        """The critical line: SIGTERM line + margin (default 10 % of MemTotal)."""
        return self.term_percent + self.critical_margin_percent

    @property
    def forecast_seconds(self) -> int:
        return duration_seconds(self.forecast_window)


def _pct(value: float) -> str:
    """8.0 -> '8', 8.5 -> '8.5' (PromQL and prose)."""
    return f"{value:g}"


Rule = dict[str, str]


@dataclass(frozen=True)
class _Names:
    """The PromQL selectors and the prose every rule shares, built once from the thresholds."""

    job: str
    avail: str
    total: str
    term: str
    kill: str
    crit: str
    warn: str
    lines: str
    unit_state: str
    units: str
    journal: str
    kills: str

    @classmethod
    def of(cls, t: AlertThresholds) -> _Names:
        job = f'job="{t.node_job}"'
        term, kill, crit, warn = (_pct(x) for x in (t.term_percent, t.kill_percent, t.critical_percent, t.warn_percent))
        return cls(
            job=job,
            avail=f"node_memory_MemAvailable_bytes{{{job}}}",
            total=f"node_memory_MemTotal_bytes{{{job}}}",
            term=term, kill=kill, crit=crit, warn=warn,
            lines=f"earlyoom SIGTERM at {term}%, SIGKILL at {kill}% of MemTotal",
            unit_state=f'node_systemd_unit_state{{{job},name=~"{t.guard_units}",state="active"}}',
            units=" / ".join(t.guard_units.split("|")),
            journal=" ".join(f"-u {u}" for u in t.guard_units.split("|")),
            kills=f"{t.earlyoom_kills_metric}{{{job}}}",
        )


def _node_memory_available_low(t: AlertThresholds, n: _Names) -> Rule:
    return {
        "alert": "NodeMemoryAvailableLow",
        "expr": f"100 * {n.avail} / {n.total} < {n.warn}",
        "for": t.warn_for,
        "severity": "warning",
        "summary": f"{INSTANCE}: available memory below {n.warn}% of MemTotal",
        "description": (
            f"MemAvailable on {INSTANCE} is {VALUE_PCT}% of MemTotal "
            f"({n.lines}). On a unified-memory node this is also the GPU's memory. Find what grew "
            f"(`free -h`, `nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv`), "
            f"shrink the training job (sequence length, batch, gradient checkpointing) or stop/shrink "
            f"vLLM before earlyoom has to choose. Container memory metrics will look small: ignore them."
        ),
    }


def _node_memory_available_critical(t: AlertThresholds, n: _Names) -> Rule:
    return {
        "alert": "NodeMemoryAvailableCritical",
        "expr": f"100 * {n.avail} / {n.total} < {n.crit}",
        "for": t.critical_for,
        "severity": "critical",
        "summary": f"{INSTANCE}: available memory within {_pct(t.critical_margin_percent)} "
                   f"points of the earlyoom SIGTERM line",
        "description": (
            f"MemAvailable on {INSTANCE} is {VALUE_PCT}% of MemTotal; "
            f"{n.lines}. earlyoom is about to kill (the training job first, if it is marked). Act now: stop "
            f"the training job yourself, cleanly, or free memory. If earlyoom is not running, the kernel "
            f"will swap and hang instead: in the incident that cost 15 hours and a walk to the machine."
        ),
    }


def _node_memory_exhaustion_forecast(t: AlertThresholds, n: _Names) -> Rule:
    return {
        "alert": "NodeMemoryExhaustionForecast",
        "expr": (
            f"predict_linear({n.avail}[{t.forecast_lookback}], {t.forecast_seconds})\n"
            f"  < {n.total} * {n.term} / 100\n"
            f"and\n"
            f"100 * {n.avail} / {n.total} < {_pct(t.forecast_below_percent)}"
        ),
        "for": t.forecast_for,
        "severity": "warning",
        "summary": f"{INSTANCE}: available memory will reach the earlyoom SIGTERM line "
                   f"within {t.forecast_window}",
        "description": (
            f"At the rate of the last {t.forecast_lookback}, MemAvailable on {INSTANCE} "
            f"reaches {n.term}% of MemTotal (earlyoom's SIGTERM line) within {t.forecast_window}. "
            f"This is the early warning: in the incident memory fell "
            f"from 54 GB to 3.5 GB in 20 minutes after the model loaded. Check the training job's "
            f"sequence length / batch and gradient checkpointing, and whether vLLM shares the node; stop "
            f"or shrink one of them before earlyoom does it for you."
        ),
    }


def _node_swap_activity(t: AlertThresholds, n: _Names) -> Rule:
    return {
        "alert": "NodeSwapActivity",
        "expr": (
            f"rate(node_vmstat_pswpin{{{n.job}}}[{t.swap_rate_window}])\n"
            f"  + rate(node_vmstat_pswpout{{{n.job}}}[{t.swap_rate_window}])\n"
            f"> {_num(t.swap_activity_rate)}"
        ),
        "for": t.swap_for,
        "severity": "warning",
        "summary": "{{ $labels.instance }}: the node is swapping",
        "description": (
            f"{INSTANCE} swaps more than {_num(t.swap_activity_rate)} pages/s (in + out, over "
            f"{t.swap_rate_window}). On a "
            f"unified-memory node swapping is how the incident's hang began: the machine crawls instead "
            f"of an OOM kill, then stops answering. Free memory now, and turn swap off before training "
            f"(`swapoff -a`); earlyoom then kills quickly instead."
        ),
    }


def _node_memory_pressure_stall(t: AlertThresholds, n: _Names) -> Rule:
    return {
        "alert": "NodeMemoryPressureStall",
        "expr": (
            f"rate(node_pressure_memory_stalled_seconds_total{{{n.job}}}[{t.psi_window}])\n"
            f"> {_num(t.psi_full_threshold)}"
        ),
        "for": t.psi_for,
        "severity": "warning",
        "summary": "{{ $labels.instance }}: tasks are stalled on memory (PSI full)",
        "description": (
            f"All non-idle tasks on {INSTANCE} were stalled waiting for memory more than "
            f"{_pct(t.psi_full_threshold * 100)}% of the time over {t.psi_window} (PSI memory full). "
            f"The kernel is reclaiming or swapping hard; the node may "
            f"stop responding (SSH included). Free memory or stop the largest job now."
        ),
    }


def _earlyoom_down(t: AlertThresholds, n: _Names) -> Rule:
    return {
        "alert": "EarlyoomDown",
        "expr": (
            f"up{{{n.job}}} == 1\n"
            f"unless on(instance)\n"
            f"{n.unit_state} == 1"
        ),
        "for": t.earlyoom_down_for,
        "severity": "critical",
        "summary": "{{ $labels.instance }}: the low-memory guard (earlyoom or nohang) is not running",
        "description": (
            f"Neither {n.units} is active on {INSTANCE} (or node_exporter's systemd "
            f"collector does not report them; sparkguard_guard_info says which guard the node should run). "
            f"Without its guard nothing kills a runaway job before the kernel swaps and hangs. "
            f"`systemctl status {n.units.split(' / ')[0]}`, `journalctl {n.journal}` (earlyoom 1.7 exits with "
            f"code 13 on --ignore / --sort-by-rss; nohang refuses an invalid config), then rerun sparkguard apply."
        ),
    }


def _earlyoom_killed_process(t: AlertThresholds, n: _Names) -> Rule:
    return {
        "alert": "EarlyoomKilledProcess",
        "expr": (
            f"increase({n.kills}[{t.earlyoom_kill_window}]) > 0\n"
            f"or\n"
            f"(\n"
            f"  {n.kills}\n"
            f"    unless {n.kills} offset {t.earlyoom_kill_window}\n"
            f")\n"
            f"and on(instance)\n"
            f"up{{{n.job}}} offset {t.earlyoom_kill_window} == 1\n"
            f"or on(instance)\n"
            f"increase({t.earlyoom_kills_all_metric}{{{n.job}}}[{t.earlyoom_kill_window}]) > 0"
        ),
        "for": "",
        "severity": "warning",
        "summary": f"{INSTANCE}: the low-memory guard killed {go('$labels.' + t.earlyoom_victim_label)}",
        "description": (
            f"The low-memory guard (earlyoom or nohang) killed {go('$labels.' + t.earlyoom_victim_label)} on "
            f"{INSTANCE} in the last {t.earlyoom_kill_window} because MemAvailable fell to {n.term}% "
            f"of MemTotal. The node survived; the job did not. `journalctl -t sparkguard-earlyoom {n.journal}` "
            f"names the pid. Fix the "
            f"configuration (sequence length, batch, gradient checkpointing, vLLM's share) before "
            f"restarting the job, or it will happen again."
        ),
    }


def kernel_oom_victims_template(t: AlertThresholds) -> str:
    """The annotation text that names the kernel OOM killer's recent victims (a Go template).

    The alert itself needs nothing but ``node_vmstat_oom_kill``; the names come from node-metrics'
    textfile gauge, looked up when the annotation is expanded: every victim of this instance whose last
    kill is within ``kernel_oom_kill_window``, sorted by name, "(memory cgroup limit)" after a kill by a
    cgroup's limit. Without such a series (kernel log unreadable, textfile not refreshed yet): "a process".
    """
    window = duration_seconds(t.kernel_oom_kill_window)
    query = f'{t.kernel_oom_last_kill_metric}{{job="{t.node_job}",instance=%q}} > time() - {window}'
    return "".join([
        go(f"with printf `{query}` $labels.instance | query"),
        go('range $i, $s := sortByLabel "victim" .'), go("if $i"), ", ", go("end"), go("$s.Labels.victim"),
        go('if eq $s.Labels.scope "cgroup"'), " (memory cgroup limit)", go("end"), go("end"),
        go("else"), "a process", go("end"),
    ])


def _kernel_oom_killed_process(t: AlertThresholds, n: _Names) -> Rule:
    victims = kernel_oom_victims_template(t)
    return {
        "alert": "KernelOomKilledProcess",
        "expr": f"increase(node_vmstat_oom_kill{{{n.job}}}[{t.kernel_oom_kill_window}]) > 0",
        "for": t.kernel_oom_for,
        "severity": "critical",
        "summary": f"{INSTANCE}: the kernel OOM killer killed {victims}",
        "description": (
            f"The kernel's own OOM killer killed {victims} on {INSTANCE} in the last "
            f"{t.kernel_oom_kill_window} (node_vmstat_oom_kill rose). This alert looks at no memory gauge on "
            f"purpose: on a DGX Spark (GB10) the NVIDIA driver's allocation path can end in the kernel OOM killer "
            f"while MemAvailable still shows ~22 GiB (vLLM issue 56824), above every earlyoom line, so no memory "
            f"alert fires and earlyoom does nothing. Whatever was killed is gone (a training run, vLLM's engine). "
            f"`journalctl -k -b -g 'invoked oom-killer|Killed process'` shows who asked for the memory, the "
            f"victim and the memory state at that moment. Restart the job smaller (vLLM --gpu-memory-utilization, "
            f"batch, sequence length) before it meets the same wall. \"(memory cgroup limit)\": a container's or "
            f"unit's memory limit ran out, not the node."
        ),
    }


def _swap_on_during_training(t: AlertThresholds, n: _Names) -> Rule:
    return {
        "alert": "SwapOnDuringTraining",
        "expr": (
            f"{t.training_mode_metric}{{{n.job}}} == 1\n"
            f"and on(instance)\n"
            f"node_memory_SwapTotal_bytes{{{n.job}}} > 0\n"
            f"unless on(instance)\n"
            f"{t.swap_policy_metric}{{{n.job}}} == 1"
        ),
        "for": t.swap_on_training_for,
        "severity": "warning",
        "summary": "{{ $labels.instance }}: swap is on while the node is in training mode",
        "description": (
            "{{ $labels.instance }} is in training mode but has swap configured. With swap, running out "
            "of memory turns into a crawl and a kernel hang (the incident) instead of a fast earlyoom "
            "kill. Run `swapoff -a` before training, or end training mode."
        ),
    }


def _memory_outside_cgroups(t: AlertThresholds, n: _Names) -> Rule:
    return {
        "alert": "MemoryOutsideCgroups",
        "expr": f"{t.outside_cgroups_metric}{{{n.job}}} > {int(t.memory_outside_cgroups_bytes)}",
        "for": t.outside_cgroups_for,
        "severity": "info",
        "summary": "{{ $labels.instance }}: {{ $value | humanize1024 }}B of used memory is outside "
                   "every cgroup",
        "description": (
            "{{ $value | humanize1024 }}B of the memory in use on {{ $labels.instance }} "
            "(MemTotal - MemAvailable) is not charged to any memory cgroup; on a unified-memory node that "
            "is GPU-driver memory. Docker --memory, systemd MemoryMax= and container_memory_* do not see "
            "it and cannot stop it: watch node_memory_MemAvailable_bytes, and rely on earlyoom."
        ),
    }


def _node_exporter_down(t: AlertThresholds, n: _Names) -> Rule:
    return {
        "alert": "NodeExporterDown",
        "expr": (f"(up{{{n.job}}} == 0 and time() - timestamp(up{{{n.job}}}) < {t.exporter_sample_max_age_s})"
                 f"\nor\nabsent(up{{{n.job}}})"),
        "for": t.exporter_down_for,
        "severity": "critical",
        "summary": f"node_exporter '{INSTANCE}' (job {t.node_job}) cannot be scraped",
        "description": (
            f"Prometheus cannot scrape job {t.node_job} target '{INSTANCE}' (empty: the job has "
            f"no targets at all). A "
            f"unified-memory node that ran out of memory looks exactly like this: in the incident scraping "
            f"stopped at 11:07 and the host needed a power cycle. Try SSH; if it does not answer, use the "
            f"BMC / out-of-band console before walking to the machine."
        ),
    }


def _node_textfile_scrape_error(t: AlertThresholds, n: _Names) -> Rule:
    return {
        "alert": "NodeTextfileScrapeError",
        "expr": f"node_textfile_scrape_error{{{n.job}}} == 1",
        "for": t.textfile_error_for,
        "severity": "warning",
        "summary": "{{ $labels.instance }}: node_exporter cannot read a textfile: sparkguard's own metrics are "
                   "missing",
        "description": (
            f"node_exporter on {INSTANCE} failed to parse a file in its textfile directory "
            f"({TEXTFILE_DIR}) and exports none of that file's metrics. sparkguard's metrics live there "
            f"(sparkguard_*.prom: the guard's kill counters, node-metrics, the GPU ranking agent), so the alerts "
            f"built on them are blind: EarlyoomKilledProcess, SwapOnDuringTraining, MemoryOutsideCgroups, "
            f"SparkguardMetricsStale and KernelOomKilledProcess's victim names. "
            f"`journalctl -u prometheus-node-exporter -g textfile` names the file and the error, "
            f"`promtool check metrics < {TEXTFILE_DIR}/FILE` the line. A line a process name put there (a GPU "
            f"process named by a local user) is a node-metrics bug: report it; remove any file that is not "
            f"sparkguard's or your own."
        ),
    }


def _sparkguard_metrics_stale(t: AlertThresholds, n: _Names) -> Rule:
    error = f"node_textfile_scrape_error{{{n.job}}} == 1"

    def branch(metric: str, stale_after: str, expected: str, unit: str) -> str:
        series = f"{metric}{{{n.job}}}"
        return (
            f"label_replace(\n"
            # Still scraped: a dropped target's last value lingers for the lookback and only looks old.
            f"  (time() - {series} > {duration_seconds(stale_after)}\n"
            f"    and time() - timestamp({series}) < {t.exporter_sample_max_age_s})\n"
            f"  or\n"
            f"  (\n"
            f"    {expected}\n"
            f"      unless on(instance) {series}\n"
            f"      unless on(instance) {error}\n"
            # A target Prometheus still scrapes: a dropped one's last `up` lingers for the lookback.
            f"      and on(instance) time() - timestamp(up{{{n.job}}}) < {t.exporter_sample_max_age_s}\n"
            f"  ),\n"
            f"  \"unit\", \"{unit}\", \"\", \"\"\n"
            f")"
        )

    ranking = branch(t.gpu_ranking_timestamp_metric, t.gpu_ranking_stale_after,
                     f'group without(name, state, type) (node_systemd_unit_state{{{n.job},name="{t.gpu_ranking_unit}"}})',
                     t.gpu_ranking_unit)
    node_metrics = branch(t.node_metrics_timestamp_metric, t.node_metrics_stale_after, f"up{{{n.job}}} == 1",
                          t.node_metrics_unit)
    return {
        "alert": "SparkguardMetricsStale",
        "expr": f"{ranking}\nor\n{node_metrics}",
        "for": t.metrics_stale_for,
        "severity": "warning",
        "summary": "{{ $labels.instance }}: {{ $labels.unit }} has stopped refreshing its metrics",
        "description": (
            f"{UNIT} on {INSTANCE} has not written its textfile metrics for "
            f"longer than its limit ({t.gpu_ranking_unit} {t.gpu_ranking_stale_after}, {t.node_metrics_unit} "
            f"{t.node_metrics_stale_after}), or they are missing where it runs. node_exporter still serves the "
            f"last values, so what reads them sees a frozen past: with the GPU ranking agent stuck, new GPU jobs "
            f"are not ranked by the memory they hold and earlyoom or the kernel may kill the wrong process; "
            f"with node-metrics stuck, SwapOnDuringTraining, MemoryOutsideCgroups and the kernel OOM victims "
            f"are blind. `systemctl status {UNIT}` (node-metrics runs from "
            f"{t.node_metrics_unit.rsplit('.', 1)[0]}.timer: check that it is active), `journalctl -u "
            f"{UNIT}`, then `systemctl restart {UNIT}` or rerun sparkguard apply. "
            f"A node clock off by minutes looks stale too: check `timedatectl`."
        ),
    }


def _watchdog(t: AlertThresholds, n: _Names) -> Rule:
    return {
        # The dead man's switch (the kube-prometheus "Watchdog" pattern): silence itself must page.
        "alert": "Watchdog",
        "expr": "vector(1)",
        "for": "",
        "severity": "info",
        "summary": "the alerting pipeline is alive (always firing)",
        "description": (
            "Always firing, on purpose. Alertmanager sends it every minute to the heartbeat receiver "
            "(monitoring.alertmanager.heartbeat_url: a dead man's switch such as healthchecks.io, or a peer). "
            "When the heartbeats stop, this node's Prometheus or Alertmanager, or the node itself, is down: "
            "a hung node cannot send its own NodeExporterDown."
        ),
    }


# In the order the rules file lists them.
RULES = (
    _node_memory_available_low,
    _node_memory_available_critical,
    _node_memory_exhaustion_forecast,
    _node_swap_activity,
    _node_memory_pressure_stall,
    _earlyoom_down,
    _earlyoom_killed_process,
    _kernel_oom_killed_process,
    _swap_on_during_training,
    _memory_outside_cgroups,
    _node_exporter_down,
    _node_textfile_scrape_error,
    _sparkguard_metrics_stale,
    _watchdog,
)


def _rules(t: AlertThresholds) -> list[Rule]:
    names = _Names.of(t)
    return [build(t, names) for build in RULES]


def render_alert_rules(t: AlertThresholds | None = None) -> str:
    """The Prometheus rules file (YAML text) for thresholds ``t``; deterministic."""
    t = t or AlertThresholds()
    return render_template(TEMPLATE, t=t, rules=_rules(t),
                           term=_pct(t.term_percent), kill=_pct(t.kill_percent),
                           critical=_pct(t.critical_percent), warn=_pct(t.warn_percent),
                           margin=_pct(t.critical_margin_percent), guard=_pct(t.forecast_below_percent))
