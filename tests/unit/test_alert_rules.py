"""The Prometheus alert rules: rendered from earlyoom's lines, checked and replayed by promtool.

The replay is the incident (incident-report.en.md): MemTotal 128 GB, MemAvailable 114 GB at
09:48, 54 GB at 10:03, 3.5 GB at 10:23, 0.3 GB at 10:33, swap 9.7 GB at 10:38, scraping
stops at 11:07. Minute 0 is 09:48. The forecast and the critical alert must be firing by
10:25 (minute 37); a steady plateau, a page-cache sawtooth and a short dip must stay quiet.

promtool comes from the ``prometheus`` package (``apt-get install prometheus``). Without it
these tests skip, except under CI (``CI`` set), where a missing promtool is a failure.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from sparkguard.roles.monitoring.alerts import AlertThresholds, duration_seconds, render_alert_rules
from tests.conftest import in_ci
from tests.promtool.scenarios import (
    ALERTS,
    GB,
    INSTANCE,
    NODE,
    Scenario,
    Series,
    build_test_file,
    clock,
    healthy_series,
    incident,
    kernel_oom_victims,
    measure,
    plateau,
    promtool_binary,
    run_promtool,
    sawtooth,
    spike,
    stop_after,
)

DEFAULT = AlertThresholds()


@pytest.fixture(scope="module")
def promtool() -> str:
    path = promtool_binary()
    if path is None:
        message = "promtool not found (apt-get install prometheus)"
        if in_ci():
            pytest.fail(message + "; CI is set, so this is a failure")
        pytest.skip(message)
    return path


def rules_doc(text: str) -> dict:
    return yaml.safe_load(text)


def rules_by_name(text: str) -> dict:
    return {r["alert"]: r for g in rules_doc(text)["groups"] for r in g["rules"]}


def promtool_test(tmp_path: Path, scenarios: list[Scenario], thresholds: AlertThresholds = DEFAULT,
                  rules_text: str | None = None):
    """Write the rules and a promtool test file for ``scenarios``; run ``promtool test rules``.

    The expected annotations always come from the rules rendered for ``thresholds``; ``rules_text``
    replaces the file promtool loads (to check that broken rules fail)."""
    expected_text = render_alert_rules(thresholds)
    rules = tmp_path / "sparkguard-alerts.yml"
    rules.write_text(expected_text if rules_text is None else rules_text)
    test = tmp_path / "sparkguard-alerts.test.yml"
    doc = build_test_file(rules, scenarios, thresholds, expected_text)
    test.write_text(yaml.safe_dump(doc, sort_keys=False, width=200))
    return run_promtool("test", "rules", str(test))


def assert_passes(result) -> None:
    assert result.returncode == 0, f"promtool test rules failed:\n{result.stdout}\n{result.stderr}"


# ------------------------------------------------------------------ rendering (no promtool)
def test_render_is_deterministic_and_has_every_alert():
    text = render_alert_rules(AlertThresholds())
    assert text == render_alert_rules(AlertThresholds()) == render_alert_rules()
    rules = rules_by_name(text)
    assert sorted(rules) == sorted(ALERTS + ("Watchdog",))   # Watchdog: the heartbeat, tested on its own
    for name, rule in rules.items():
        assert rule["labels"]["severity"] in ("info", "warning", "critical"), name
        assert rule["annotations"]["summary"].strip(), name
        assert len(rule["annotations"]["description"]) > 80, name  # says what to do, not just what
    assert rules["MemoryOutsideCgroups"]["labels"]["severity"] == "info"
    assert rules["NodeMemoryAvailableCritical"]["labels"]["severity"] == "critical"


def test_node_level_metrics_only():
    text = render_alert_rules()
    exprs = " ".join(r["expr"] for r in rules_by_name(text).values())
    assert "container_" not in exprs
    assert 'node_memory_MemAvailable_bytes{job="node"}' in exprs
    assert "node_vmstat_pswpin" in exprs and "node_vmstat_pswpout" in exprs
    assert "node_pressure_memory_stalled_seconds_total" in exprs
    assert 'node_systemd_unit_state{job="node",name=~"earlyoom.service|nohang.service",state="active"}' in exprs


def test_lines_follow_earlyoom_settings():
    """The alert lines are earlyoom's lines: move earlyoom and every memory alert moves with it."""
    default = rules_by_name(render_alert_rules())
    assert default["NodeMemoryAvailableCritical"]["expr"].strip().endswith("< 10")   # 8 + 2
    assert default["NodeMemoryAvailableLow"]["expr"].strip().endswith("< 15")
    forecast = default["NodeMemoryExhaustionForecast"]["expr"]
    assert 'predict_linear(node_memory_MemAvailable_bytes{job="node"}[10m], 1800)' in forecast
    assert 'node_memory_MemTotal_bytes{job="node"} * 8 / 100' in forecast

    moved = rules_by_name(render_alert_rules(AlertThresholds(term_percent=10, kill_percent=5, warn_percent=20,
                                                             forecast_window="45m")))
    assert moved["NodeMemoryAvailableCritical"]["expr"].strip().endswith("< 12")
    assert moved["NodeMemoryAvailableLow"]["expr"].strip().endswith("< 20")
    assert "* 10 / 100" in moved["NodeMemoryExhaustionForecast"]["expr"]
    assert "[10m], 2700)" in moved["NodeMemoryExhaustionForecast"]["expr"]
    assert "SIGTERM at 10%, SIGKILL at 5%" in moved["NodeMemoryAvailableCritical"]["annotations"]["description"]


def test_from_earlyoom_role_settings():
    from sparkguard.roles.earlyoom.settings import EarlyoomSettings

    t = AlertThresholds.from_earlyoom(EarlyoomSettings(term_percent=10, kill_percent=5), warn_percent=18)
    assert (t.term_percent, t.kill_percent, t.critical_percent, t.warn_percent) == (10, 5, 12, 18)
    assert AlertThresholds.from_earlyoom(EarlyoomSettings()) == AlertThresholds()
    with pytest.raises(ValueError, match="warning must come before"):
        AlertThresholds.from_earlyoom(EarlyoomSettings(term_percent=20, kill_percent=10))


def test_names_are_configurable():
    t = AlertThresholds(node_job="node-exporter", earlyoom_kills_metric="my_kills_total",
                        earlyoom_victim_label="comm", training_mode_metric="my_training",
                        guard_units="earlyoom-custom.service")
    text = render_alert_rules(t)
    assert 'job="node"' not in text
    assert 'up{job="node-exporter"}' in text and "my_kills_total" in text and "$labels.comm" in text
    assert "my_training" in text and 'name=~"earlyoom-custom.service"' in text
    assert "my_oom_ts{" in render_alert_rules(AlertThresholds(kernel_oom_last_kill_metric="my_oom_ts"))


@pytest.mark.parametrize("change, message", [
    (dict(term_percent=3, kill_percent=4), "kill_percent"),
    (dict(warn_percent=9), "warning must come before"),
    (dict(critical_margin_percent=0), "critical_margin_percent"),
    (dict(forecast_window="half an hour"), "forecast_window"),
    (dict(psi_full_threshold=5), "fraction of time"),
    (dict(earlyoom_kills_metric="kills-total"), "earlyoom_kills_metric"),
    (dict(node_job='node"} or vector(1) #'), "node_job"),
    (dict(kernel_oom_for="10m"), "kernel_oom_for"),
    (dict(kernel_oom_last_kill_metric="oom ts"), "kernel_oom_last_kill_metric"),
])
def test_bad_thresholds_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        AlertThresholds(**change)


def test_duration_parser():
    assert duration_seconds("30m") == 1800
    assert duration_seconds("1h30m") == 5400
    assert duration_seconds("90s") == 90
    for bad in ("", "30", "m", "1.5h"):
        with pytest.raises(ValueError):
            duration_seconds(bad)


def test_thresholds_are_frozen_and_documented():
    t = AlertThresholds()
    with pytest.raises(dataclasses.FrozenInstanceError):
        t.term_percent = 9  # type: ignore[misc]
    source = Path(__file__).resolve().parents[2].joinpath("roles", "monitoring", "alerts.py").read_text()
    for field in dataclasses.fields(AlertThresholds):
        # every field is followed by its docstring line in the class body
        assert f"    {field.name}:" in source
        after = source.split(f"    {field.name}:", 1)[1].split("\n", 2)[1]
        assert after.strip().startswith('"""'), f"{field.name} has no documentation"


def test_docs_show_every_rendered_expression():
    docs = Path(__file__).resolve().parents[2].joinpath("docs", "alerts.md").read_text()
    for name, rule in rules_by_name(render_alert_rules()).items():
        assert f"### {name} (" in docs, name
        assert rule["expr"].strip() in docs, f"docs/alerts.md shows an outdated expression for {name}"


# ------------------------------------------------------------------ promtool
def test_promtool_check_rules(promtool, tmp_path):
    for t in (DEFAULT, AlertThresholds(term_percent=10, kill_percent=5, warn_percent=20, forecast_for="5m")):
        path = tmp_path / "rules.yml"
        path.write_text(render_alert_rules(t))
        result = run_promtool("check", "rules", str(path))
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"SUCCESS: {len(ALERTS) + 1} rules found" in result.stdout


def incident_with_expectations() -> Scenario:
    """The incident replay with exact expectations at the moments that matter."""
    sc = incident()
    firing_at_1023 = {"NodeMemoryAvailableLow", "NodeMemoryAvailableCritical", "NodeMemoryExhaustionForecast",
                      "EarlyoomDown", "SwapOnDuringTraining", "MemoryOutsideCgroups"}
    checkpoints = {
        # 09:58, the model is loading: earlyoom missing and swap on while training, nothing about memory yet
        10: {"EarlyoomDown", "SwapOnDuringTraining"},
        # 10:23 (3.5 GB left) and 10:25: the forecast and the critical alert must be firing
        35: firing_at_1023,
        37: firing_at_1023,
        # 10:38, swap used 9.7 GB: swapping and memory stalls on top
        50: firing_at_1023 | {"NodeSwapActivity", "NodeMemoryPressureStall"},
        # 11:07, the last scrape
        79: firing_at_1023 | {"NodeSwapActivity", "NodeMemoryPressureStall"},
        # 11:18, the host is hung: only the exporter being down is left
        90: {"NodeExporterDown"},
    }
    for minute, firing in checkpoints.items():
        for alert in ALERTS:
            sc.expect[(alert, minute)] = [dict(NODE)] if alert in firing else []
    return sc


def test_incident_replay(promtool, tmp_path):
    assert_passes(promtool_test(tmp_path, [incident_with_expectations()]))


def test_incident_fire_times(promtool):
    """The measured timeline (quoted in docs/alerts.md): early enough, and in a sensible order."""
    fired = measure(incident())
    first = {alert: (minutes[0] if minutes else None) for alert, minutes in fired.items()}
    report = {alert: (clock(m) if m is not None else None) for alert, m in first.items()}
    # 10:20:20 is when MemAvailable crossed the SIGTERM line (8% of 128 GB) in the replay
    assert first["NodeMemoryExhaustionForecast"] <= 25, report          # >= 7 minutes before the line
    assert first["NodeMemoryAvailableCritical"] <= 37, report
    assert first["NodeMemoryAvailableLow"] <= first["NodeMemoryAvailableCritical"], report
    assert 45 <= first["NodeSwapActivity"] <= 50, report                 # swapping began 10:33
    assert 45 <= first["NodeMemoryPressureStall"] <= 50, report
    assert first["NodeExporterDown"] is not None and first["NodeExporterDown"] > 79, report
    assert first["EarlyoomKilledProcess"] is None, report                  # there was no earlyoom
    # once firing, the forecast and critical alerts stay firing until the series stop
    for alert in ("NodeMemoryExhaustionForecast", "NodeMemoryAvailableCritical"):
        assert fired[alert] == list(range(first[alert], 80)), (alert, fired[alert])


@pytest.mark.parametrize("broken, why", [
    (AlertThresholds(forecast_for="30m"), "forecast for: 30m first fires at 10:31"),
    (AlertThresholds(forecast_window="5m"), "a 5-minute horizon first fires at 10:26"),
    (AlertThresholds(forecast_below_percent=20), "forecasting only below 20% first fires at 10:25, not 10:23"),
    (AlertThresholds(term_percent=4, kill_percent=2), "critical line at 6% first fires at 10:24"),
    (AlertThresholds(critical_for="10m"), "critical for: 10m first fires at 10:30"),
])
def test_incident_replay_catches_late_rules(promtool, tmp_path, broken, why):
    """The replay has teeth: rules that would have warned too late fail it."""
    result = promtool_test(tmp_path, [incident_with_expectations()], broken)
    assert result.returncode != 0, why


def test_incident_replay_fails_without_the_forecast_alert(promtool, tmp_path):
    doc = rules_doc(render_alert_rules())
    doc["groups"][0]["rules"] = [r for r in doc["groups"][0]["rules"] if r["alert"] != "NodeMemoryExhaustionForecast"]
    result = promtool_test(tmp_path, [incident_with_expectations()], rules_text=yaml.safe_dump(doc))
    assert result.returncode != 0
    assert "NodeMemoryExhaustionForecast" in result.stdout + result.stderr


def quiet_everywhere(sc: Scenario, alerts=ALERTS) -> Scenario:
    sc.expect_quiet(alerts, range(sc.end + 1))
    return sc


def test_plateau_is_quiet(promtool, tmp_path):
    """Hours at 54 GB available (42%): nothing fires, with or without the model load before it."""
    assert_passes(promtool_test(tmp_path, [
        quiet_everywhere(plateau(hours=4)),
        quiet_everywhere(plateau(hours=4, with_loading=True)),
    ]))


@pytest.mark.parametrize("down, up", [(8, 2), (15, 2), (30, 5), (45, 10)])
def test_page_cache_sawtooth_is_quiet(promtool, tmp_path, down, up):
    """MemAvailable swinging between 40% and 25% of MemTotal, no trend to the SIGTERM line."""
    assert_passes(promtool_test(tmp_path, [quiet_everywhere(sawtooth(0.40, 0.25, down=down, up=up, cycles=6))]))


@pytest.mark.parametrize("depth", [0.12, 0.09])
def test_two_minute_dip_is_quiet(promtool, tmp_path, depth):
    """A 2-minute dip below the warning line (12%), even below the critical line (9%): nothing fires."""
    assert_passes(promtool_test(tmp_path, [quiet_everywhere(spike(depth, start=60, length=2))]))


def test_sustained_dip_below_critical_fires(promtool, tmp_path):
    """The counterpart: 9% for long enough fires Critical (after 2m) and Low (after 5m)."""
    sc = spike(0.09, start=60, length=20)
    sc.expect[("NodeMemoryAvailableCritical", 61)] = []
    sc.expect[("NodeMemoryAvailableCritical", 62)] = [dict(NODE)]
    sc.expect[("NodeMemoryAvailableLow", 64)] = []
    sc.expect[("NodeMemoryAvailableLow", 65)] = [dict(NODE)]
    sc.expect[("NodeMemoryAvailableCritical", 85)] = []
    assert_passes(promtool_test(tmp_path, [sc]))


def test_earlyoom_killed_process(promtool, tmp_path):
    """A kill is reported with the victim's name: a new victim series (first kill) and a counter increase.

    A new series has a single sample, which increase() cannot see; the rule treats "exists now, did not
    10m ago, while the node was being scraped 10m ago" as a kill. A node that comes back after a long
    outage with its old counters must not report them as new kills.
    """
    end = 70
    n = end + 1
    sc = Scenario("earlyoom kills", healthy_series(end, [60 * GB] * n), end)
    pt = {**NODE, "victim": "pt_main_thread"}
    # pt_main_thread: first kill at minute 15 (the series appears), second kill at minute 35
    sc.series.append(Series("sparkguard_earlyoom_kills_total", [None] * 15 + [1.0] * 20 + [2.0] * (n - 35), pt))
    # VLLM::EngineCor killed before our data starts: the counter is at 3 from minute 0, never moves
    sc.series.append(Series("sparkguard_earlyoom_kills_total", [3.0] * n, {**NODE, "victim": "VLLM::EngineCor"}))
    # spark-02 hangs at minute 20, comes back at minute 40 with its old counter (textfile kept on disk)
    other = {"instance": "spark-02:9100", "job": "node"}
    back = [3.0] * 20 + ["stale"] + [None] * 19 + [3.0] * (n - 40)
    sc.series.append(Series("sparkguard_earlyoom_kills_total", back, {**other, "victim": "pt_main_thread"}))
    sc.series.append(Series("up", [1.0] * 20 + [0.0] * 20 + [1.0] * (n - 40), other))
    sc.expect.update({
        ("EarlyoomKilledProcess", 5): [],
        ("EarlyoomKilledProcess", 14): [],
        ("EarlyoomKilledProcess", 15): [pt],
        ("EarlyoomKilledProcess", 24): [pt],
        ("EarlyoomKilledProcess", 25): [],
        ("EarlyoomKilledProcess", 34): [],
        ("EarlyoomKilledProcess", 35): [pt],
        ("EarlyoomKilledProcess", 44): [pt],
        ("EarlyoomKilledProcess", 45): [],
        ("EarlyoomKilledProcess", 50): [],
        ("EarlyoomKilledProcess", 70): [],
    })
    sc.expect_quiet(["EarlyoomKilledProcess"], range(45, 71))
    assert_passes(promtool_test(tmp_path, [sc]))


def test_first_kill_on_a_freshly_scraped_node_is_reported(promtool, tmp_path):
    """Scraped for 3 minutes only: the per-victim branches cannot see the kill, the all-kills counter can."""
    end = 20
    n = end + 1
    sc = Scenario("first kill on a fresh node", healthy_series(end, [60 * GB] * n), end)
    sc.series.append(Series("sparkguard_earlyoom_kills_total", [None] * 3 + [1.0] * (n - 3),
                            {**NODE, "victim": "pt_main_thread"}))
    sc.series.append(Series("sparkguard_earlyoom_kills_all_total", [0.0] * 3 + [1.0] * (n - 3), dict(NODE)))
    sc.expect.update({
        ("EarlyoomKilledProcess", 2): [],
        ("EarlyoomKilledProcess", 4): [dict(NODE)],  # only the all-kills counter sees it yet
        # 10 minutes of scrape history: the per-victim branch now names the victim as well
        ("EarlyoomKilledProcess", 12): [{**NODE, "victim": "pt_main_thread"}],
        ("EarlyoomKilledProcess", 20): [],
    })
    assert_passes(promtool_test(tmp_path, [sc]))


def test_swap_on_during_training(promtool, tmp_path):
    end = 40
    n = end + 1
    sc = Scenario("swap and training mode", healthy_series(end, [60 * GB] * n), end)
    swap = sc.get("node_memory_SwapTotal_bytes")
    training = sc.get("sparkguard_training_mode")
    # 0-9 training, no swap; 10-19 training with swap; 20-29 swap but not training;
    # 30-40 training with swap, but the operator allowed swap for this node
    swap.values = [0.0] * 10 + [16 * GB] * 31
    training.values = [1.0] * 20 + [0.0] * 10 + [1.0] * 11
    sc.series.append(Series("sparkguard_swap_allowed_during_training", [0.0] * 30 + [1.0] * 11))
    sc.expect.update({
        ("SwapOnDuringTraining", 9): [],
        ("SwapOnDuringTraining", 11): [],          # pending (for: 2m)
        ("SwapOnDuringTraining", 12): [dict(NODE)],
        ("SwapOnDuringTraining", 19): [dict(NODE)],
        ("SwapOnDuringTraining", 25): [],
        ("SwapOnDuringTraining", 35): [],
        ("SwapOnDuringTraining", 40): [],
    })
    assert_passes(promtool_test(tmp_path, [sc]))


def test_earlyoom_down_and_exporter_down(promtool, tmp_path):
    end = 60
    n = end + 1
    # earlyoom stops at minute 10 (inactive), exporter dies at minute 30 (up 0), target vanishes at 45
    sc = Scenario("earlyoom and exporter", healthy_series(end, [60 * GB] * n), end)
    sc.series = [s for s in sc.series if not (s.name == "node_systemd_unit_state") and s.name != "up"]
    sc.series.append(Series("node_systemd_unit_state", stop_after([1.0] * 10 + [0.0] * 20, 29),
                            {**NODE, "name": "earlyoom.service", "state": "active"}))
    sc.series.append(Series("up", stop_after([1.0] * 30 + [0.0] * 15, 44)))
    # a second node whose systemd collector reports no earlyoom unit at all (never installed)
    other = {"instance": "spark-02:9100", "job": "node"}
    sc.series.append(Series("up", [1.0] * n, other))
    sc.expect.update({
        ("EarlyoomDown", 9): [other],
        ("EarlyoomDown", 14): [other],             # spark-01 pending (for: 5m)
        ("EarlyoomDown", 15): [dict(NODE), other],
        ("EarlyoomDown", 35): [other],             # spark-01 unreachable: that is NodeExporterDown's job
        ("NodeExporterDown", 29): [],
        ("NodeExporterDown", 32): [],
        ("NodeExporterDown", 33): [dict(NODE)],
        ("NodeExporterDown", 44): [dict(NODE)],
    })
    # a target Prometheus stopped scraping with its last up 0 (the package's localhost:9100, dropped by the
    # restart into sparkguard's config: a restart writes no staleness marker, so its samples just end) beside
    # the node's live target: a healthy node, never paged
    dropped = Scenario("a dropped target's last up 0", [
        Series("up", [1.0] * 10 + [0.0], {"instance": "localhost:9100", "job": "node"}),
        Series("up", [1.0] * 31, {"instance": "127.0.0.1:9100", "job": "node"})], 30)
    dropped.expect.update({("NodeExporterDown", m): [] for m in range(9, 31)})
    # no node_exporter target at all: absent(up{job="node"})
    gone = Scenario("no node targets", [Series("up", stop_after([1.0] * 5, 4))], 20)
    gone.expect.update({
        ("NodeExporterDown", 6): [],
        ("NodeExporterDown", 8): [{"job": "node"}],
        ("NodeExporterDown", 20): [{"job": "node"}],
    })
    assert_passes(promtool_test(tmp_path, [sc, dropped, gone]))


def test_memory_outside_cgroups(promtool, tmp_path):
    end = 60
    n = end + 1
    sc = Scenario("memory outside cgroups", healthy_series(end, [60 * GB] * n), end)
    # 8 GB outside cgroups (kernel, page tables: fine), then 70 GB (vLLM + a trainer's CUDA memory)
    sc.series.append(Series("sparkguard_memory_outside_cgroups_bytes", [8 * GB] * 20 + [70 * GB] * 41))
    sc.expect.update({
        ("MemoryOutsideCgroups", 19): [],
        ("MemoryOutsideCgroups", 34): [],
        ("MemoryOutsideCgroups", 35): [dict(NODE)],
    })
    assert_passes(promtool_test(tmp_path, [sc]))
    rules = rules_by_name(render_alert_rules())
    assert "65.19GiB" not in rules["MemoryOutsideCgroups"]["annotations"]["summary"]  # a template, not a value


def test_annotations_expand_as_expected(promtool, tmp_path):
    """exp_annotations carry the operator's text exactly, $value included (65.19GiB = 70e9 bytes)."""
    end = 20
    sc = Scenario("annotation", healthy_series(end, [60 * GB] * (end + 1)), end)
    sc.series.append(Series("sparkguard_memory_outside_cgroups_bytes", [70 * GB] * (end + 1)))
    sc.expect[("MemoryOutsideCgroups", 16)] = [dict(NODE)]
    text = render_alert_rules()
    test_doc = build_test_file(tmp_path / "r.yml", [sc], DEFAULT, text)
    [case] = test_doc["tests"][0]["alert_rule_test"]
    summary = case["exp_alerts"][0]["exp_annotations"]["summary"]
    assert summary == f"{INSTANCE}: 65.19GiB of used memory is outside every cgroup"
    assert_passes(promtool_test(tmp_path, [sc]))


def test_watchdog_fires_always_and_goes_only_to_the_heartbeat(promtool, tmp_path):
    """The dead man's switch: firing from the first evaluation, with no input series at all."""
    rules = tmp_path / "rules.yml"
    rules.write_text(render_alert_rules())
    test = tmp_path / "test.yml"
    test.write_text(yaml.safe_dump({"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": [],
        "alert_rule_test": [{"eval_time": t, "alertname": "Watchdog", "exp_alerts": [{
            "exp_labels": {"severity": "info"},
            "exp_annotations": rules_by_name(rules.read_text())["Watchdog"]["annotations"]}]} for t in ("0m", "90m")],
    }]}))
    result = run_promtool("test", "rules", str(test))
    assert result.returncode == 0, result.stdout + result.stderr
    from sparkguard.roles.monitoring.settings import MonitoringSettings
    from sparkguard.roles.monitoring.state import alertmanager_config

    config = alertmanager_config(MonitoringSettings(alertmanager={"webhook_url": "https://a.example/h",
                                                                  "heartbeat_url": "https://hc.example/ping/x"}))
    [route] = config["route"]["routes"]
    assert route["matchers"] == ['alertname="Watchdog"'] and route["receiver"] == "heartbeat"
    receivers = {r["name"]: r for r in config["receivers"]}
    assert receivers["heartbeat"]["webhook_configs"][0]["url"] == "https://hc.example/ping/x"
    assert "hc.example" not in str(receivers["sparkguard"])


# ------------------------------------------------------------------ the kernel's own OOM killer
def test_kernel_oom_alert_reads_no_memory_gauge():
    """KernelOomKilledProcess fires on node_vmstat_oom_kill alone (node_exporter's vmstat collector, on by
    default with oom_kill in its default fields), critical, and pages within minutes."""
    rule = rules_by_name(render_alert_rules())["KernelOomKilledProcess"]
    assert rule["expr"].strip() == 'increase(node_vmstat_oom_kill{job="node"}[10m]) > 0'
    assert rule["labels"]["severity"] == "critical"
    # for: 1m + a 15 s scrape + a 15 s evaluation + Alertmanager's 30 s group_wait: about 2 minutes
    assert duration_seconds(rule["for"]) <= 120


def kernel_oom_scenario() -> Scenario:
    """vLLM issue 56824 on a GB10: the kernel OOM killer strikes while MemAvailable reads 22 GiB (18% of
    MemTotal, above every line), PSI is quiet and there is no swap. Three kills: pt_main_thread at 14:40,
    VLLM::EngineCor by its container's memory limit at 29:50, pt_main_thread again at 31:50.
    node_vmstat_oom_kill shows each at the next scrape; the textfile names the victim a scrape later
    (it is refreshed every 15 s, on its own timer). Time in the promtool run starts at 0, so the
    last-kill timestamps are seconds from minute 0."""
    end = 45
    n = end + 1
    sc = Scenario("kernel OOM kills while every memory gauge is healthy",
                  healthy_series(end, [float(22 * 2**30)] * n), end)
    sc.get("node_vmstat_oom_kill").values = [0.0] * 15 + [1.0] * 15 + [2.0] * 2 + [3.0] * (n - 32)
    metric = DEFAULT.kernel_oom_last_kill_metric
    sc.series.append(Series(metric, [None] * 16 + [880.0] * 16 + [1910.0] * (n - 32),
                            {**NODE, "victim": "pt_main_thread", "scope": "node"}))
    sc.series.append(Series(metric, [None] * 31 + [1790.0] * (n - 31),
                            {**NODE, "victim": "VLLM::EngineCor", "scope": "cgroup"}))
    return sc


def test_kernel_oom_kill_pages_while_every_memory_gauge_is_healthy(promtool, tmp_path):
    """A rise of node_vmstat_oom_kill by one fires KernelOomKilledProcess after its 1-minute for: (well inside
    5 minutes), naming the victims of the last 10 minutes; no memory alert fires at any minute."""
    sc = kernel_oom_scenario()
    # pending at the scrape that shows the rise, firing a minute later, for the 10-minute increase window
    firing = set(range(16, 25)) | set(range(31, 42))
    for minute in range(sc.end + 1):
        sc.expect[("KernelOomKilledProcess", minute)] = [dict(NODE)] if minute in firing else []
    sc.expect_quiet([a for a in ALERTS if a != "KernelOomKilledProcess"], range(sc.end + 1))
    # the names the annotations must carry (promtool expands the query in the template and compares)
    assert kernel_oom_victims(sc, DEFAULT, NODE, 16) == "pt_main_thread"
    assert kernel_oom_victims(sc, DEFAULT, NODE, 31) == "VLLM::EngineCor (memory cgroup limit)"
    assert kernel_oom_victims(sc, DEFAULT, NODE, 32) == "VLLM::EngineCor (memory cgroup limit), pt_main_thread"
    assert kernel_oom_victims(sc, DEFAULT, NODE, 41) == "pt_main_thread"   # the cgroup kill is 10m old
    doc = build_test_file(tmp_path / "r.yml", [sc], DEFAULT, render_alert_rules())
    [case] = [c for c in doc["tests"][0]["alert_rule_test"]
              if c["alertname"] == "KernelOomKilledProcess" and c["eval_time"] == "16m"]
    assert case["exp_alerts"][0]["exp_annotations"]["summary"] == \
        f"{INSTANCE}: the kernel OOM killer killed pt_main_thread"
    assert case["exp_alerts"][0]["exp_labels"] == {**NODE, "severity": "critical"}
    assert_passes(promtool_test(tmp_path, [sc]))


def test_kernel_oom_alert_needs_neither_memory_gauges_nor_the_victim(promtool, tmp_path):
    """Only node_exporter's counter: it still fires (the victim is "a process" without the textfile
    metric, e.g. a kernel log the unit cannot read), and only for the node whose counter rose."""
    end = 20
    n = end + 1
    other = {"instance": "spark-02:9100", "job": "node"}
    sc = Scenario("only node_vmstat_oom_kill", [
        Series("node_vmstat_oom_kill", [0.0] * 5 + [1.0] * (n - 5)), Series("up", [1.0] * n),
        Series("node_vmstat_oom_kill", [2.0] * n, other), Series("up", [1.0] * n, other),
    ], end)
    sc.expect.update({
        ("KernelOomKilledProcess", 5): [],            # pending
        ("KernelOomKilledProcess", 6): [dict(NODE)],
        ("KernelOomKilledProcess", 14): [dict(NODE)],
        ("KernelOomKilledProcess", 15): [],
    })
    assert kernel_oom_victims(sc, DEFAULT, NODE, 6) == "a process"
    assert_passes(promtool_test(tmp_path, [sc]))


def test_no_kernel_oom_rise_no_alert(promtool, tmp_path):
    """Kills from before the data began (counter flat at 3, an old victim gauge) and a reboot (the counter
    starts again at 0) are not kills now: quiet. The plateau, sawtooth and dip tests hold it quiet too."""
    end = 40
    n = end + 1
    sc = Scenario("no kernel OOM kill", healthy_series(end, [60 * GB] * n), end)
    sc.get("node_vmstat_oom_kill").values = [3.0] * n
    sc.series.append(Series(DEFAULT.kernel_oom_last_kill_metric, [0.0] * n,
                            {**NODE, "victim": "pt_main_thread", "scope": "node"}))
    other = {"instance": "spark-02:9100", "job": "node"}
    sc.series.append(Series("node_vmstat_oom_kill", stop_after([3.0] * 20, 19) + [None] * 4 + [0.0] * (n - 25),
                            other))
    sc.series.append(Series("up", [1.0] * 20 + [0.0] * 5 + [1.0] * (n - 25), other))
    sc.expect_quiet(["KernelOomKilledProcess"], range(end + 1))
    assert_passes(promtool_test(tmp_path, [sc]))


def test_the_kernel_oom_replay_has_teeth(promtool, tmp_path):
    """Rules that would page late or never fail the kernel OOM replay: a 6-minute for:, or no rule."""
    def expect(sc):
        sc.expect[("KernelOomKilledProcess", 16)] = [dict(NODE)]
        return sc
    late = promtool_test(tmp_path, [expect(kernel_oom_scenario())],
                         rules_text=render_alert_rules(AlertThresholds(kernel_oom_for="6m", kernel_oom_kill_window="10m")))
    assert late.returncode != 0
    doc = rules_doc(render_alert_rules())
    doc["groups"][0]["rules"] = [r for r in doc["groups"][0]["rules"] if r["alert"] != "KernelOomKilledProcess"]
    assert promtool_test(tmp_path, [expect(kernel_oom_scenario())], rules_text=yaml.safe_dump(doc)).returncode != 0


# ------------------------------------------------------------------ sparkguard's own textfile metrics
def on_node(series: list[Series], instance: str) -> list[Series]:
    """The same series for another node (instance label replaced)."""
    return [Series(s.name, list(s.values), {**s.labels, "instance": instance}) for s in series]


def test_textfile_alerts_render():
    """The scrape-error alert reads node_exporter's own gauge; the staleness alert asks for the GPU ranking
    agent's timestamp only where the agent's unit is reported, for node-metrics' wherever the exporter is up."""
    rules = rules_by_name(render_alert_rules())
    error = rules["NodeTextfileScrapeError"]
    assert error["expr"].strip() == 'node_textfile_scrape_error{job="node"} == 1'
    assert (error["for"], error["labels"]["severity"]) == ("3m", "warning")
    stale = rules["SparkguardMetricsStale"]
    expr = stale["expr"]
    assert 'time() - sparkguard_gpu_ranking_last_pass_timestamp_seconds{job="node"} > 300' in expr
    assert 'time() - sparkguard_node_metrics_timestamp_seconds{job="node"} > 300' in expr
    assert 'node_systemd_unit_state{job="node",name="sparkguard-gpu-ranking.service"}' in expr
    assert "absent(" not in expr    # a node without the agent must not page forever
    assert (stale["for"], stale["labels"]["severity"]) == ("2m", "warning")
    moved = rules_by_name(render_alert_rules(AlertThresholds(
        gpu_ranking_stale_after="90s", node_metrics_stale_after="1h", gpu_ranking_unit="my-ranker.service",
        node_metrics_timestamp_metric="my_ts", textfile_error_for="10m")))
    assert "sparkguard_gpu_ranking_last_pass_timestamp_seconds{job=\"node\"} > 90" in moved["SparkguardMetricsStale"]["expr"]
    assert 'time() - my_ts{job="node"} > 3600' in moved["SparkguardMetricsStale"]["expr"]
    assert 'name="my-ranker.service"' in moved["SparkguardMetricsStale"]["expr"]
    assert moved["NodeTextfileScrapeError"]["for"] == "10m"


def test_textfile_alerts_do_not_depend_on_the_host_config():
    """One rules file watches every node target (peers included), so whether a node runs the GPU ranking agent
    is read from that node's own systemd collector, never from the rendering host's earlyoom.gpu_ranking."""
    from sparkguard.roles.earlyoom.settings import EarlyoomSettings

    assert render_alert_rules(AlertThresholds.from_earlyoom(EarlyoomSettings(gpu_ranking=False))) == \
        render_alert_rules(AlertThresholds.from_earlyoom(EarlyoomSettings(gpu_ranking=True)))


@pytest.mark.parametrize("change, message", [
    (dict(gpu_ranking_unit='x"} or vector(1) #'), "gpu_ranking_unit"),
    (dict(node_metrics_unit="node-metrics$1.service"), "node_metrics_unit"),
    (dict(gpu_ranking_stale_after="0s"), "gpu_ranking_stale_after"),
    (dict(node_metrics_stale_after="five minutes"), "node_metrics_stale_after"),
    (dict(gpu_ranking_timestamp_metric="last pass"), "gpu_ranking_timestamp_metric"),
    (dict(textfile_error_for="3"), "textfile_error_for"),
])
def test_bad_textfile_thresholds_are_refused(change, message):
    with pytest.raises(ValueError, match=message):
        AlertThresholds(**change)


def textfile_error_scenario() -> Scenario:
    """A GPU process whose name ends in a backslash breaks sparkguard_node.prom from minute 10 to 24:
    node_exporter reports node_textfile_scrape_error 1 and drops every metric of that file (training mode,
    node-metrics' timestamp). spark-02 is a healthy node beside it."""
    end = 40
    n = end + 1
    sc = Scenario("node-metrics' textfile unreadable", healthy_series(end, [60 * GB] * n), end)
    sc.get("node_textfile_scrape_error").values = [0.0] * 10 + [1.0] * 15 + [0.0] * (n - 25)
    for name in ("sparkguard_node_metrics_timestamp_seconds", "sparkguard_training_mode"):
        series = sc.get(name)
        series.values = series.values[:10] + ["stale"] + [None] * 14 + series.values[25:]
    sc.series += on_node(healthy_series(end, [60 * GB] * n), "spark-02:9100")
    return sc


def test_textfile_scrape_error_fires_and_nothing_else_does(promtool, tmp_path):
    """NodeTextfileScrapeError fires after 3 minutes and clears with the file; the missing node-metrics
    timestamp does not page a second time (SparkguardMetricsStale stays quiet), nor does anything else."""
    sc = textfile_error_scenario()
    firing = set(range(13, 25))
    for minute in range(sc.end + 1):
        sc.expect[("NodeTextfileScrapeError", minute)] = [dict(NODE)] if minute in firing else []
    sc.expect_quiet([a for a in ALERTS if a != "NodeTextfileScrapeError"], range(sc.end + 1))
    assert_passes(promtool_test(tmp_path, [sc]))


def stale_scenario() -> Scenario:
    """Five nodes, 40 minutes:

    - spark-01: the GPU ranking agent hangs at minute 10 (its timestamp stays 599 s) and is restarted at 30;
    - spark-02: node-metrics' timer stops after minute 5 (its timestamp stays 295 s);
    - spark-03: no GPU ranking agent (earlyoom.gpu_ranking: false): no unit, no timestamp, ever;
    - spark-04: the agent's unit failed at start and node-metrics never ran: both timestamps missing;
    - spark-05: node_exporter dies at minute 20 (all its series stop, up 0): NodeExporterDown's job.
    """
    end = 40
    n = end + 1
    healthy = healthy_series(end, [60 * GB] * n)
    sc = Scenario("stale sparkguard textfile metrics", on_node(healthy, INSTANCE), end)   # copies
    ranking = sc.get("sparkguard_gpu_ranking_last_pass_timestamp_seconds")
    ranking.values = ranking.values[:10] + [599.0] * 20 + ranking.values[30:]

    spark02 = on_node(healthy, "spark-02:9100")
    [node_metrics] = [s for s in spark02 if s.name == "sparkguard_node_metrics_timestamp_seconds"]
    node_metrics.values = node_metrics.values[:6] + [295.0] * (n - 6)

    spark03 = [s for s in on_node(healthy, "spark-03:9100") if s.name != "sparkguard_gpu_ranking_last_pass_timestamp_seconds"
               and s.labels.get("name") != "sparkguard-gpu-ranking.service"]

    spark04 = [s for s in on_node(healthy, "spark-04:9100") if s.name not in (
        "sparkguard_gpu_ranking_last_pass_timestamp_seconds", "sparkguard_node_metrics_timestamp_seconds")]
    for s in spark04:
        if s.labels.get("name") == "sparkguard-gpu-ranking.service":
            s.values = [1.0 if s.labels["state"] == "failed" else 0.0] * n

    spark05 = on_node(healthy, "spark-05:9100")
    for s in spark05:
        s.values = [1.0] * 20 + [0.0] * (n - 20) if s.name == "up" else stop_after(s.values, 19)

    sc.series += spark02 + spark03 + spark04 + spark05
    return sc


def test_stale_textfile_metrics(promtool, tmp_path):
    """SparkguardMetricsStale: an old timestamp (5m) for 2m, or a missing one where its writer should run;
    never for a node without the agent or an unreachable exporter. Every other alert stays quiet (spark-05's
    NodeExporterDown aside)."""
    sc = stale_scenario()
    ranking = {**NODE, "unit": "sparkguard-gpu-ranking.service"}
    spark02 = {"instance": "spark-02:9100", "job": "node", "unit": "sparkguard-node-metrics.service"}
    spark04 = [{"instance": "spark-04:9100", "job": "node", "unit": "sparkguard-gpu-ranking.service"},
               {"instance": "spark-04:9100", "job": "node", "unit": "sparkguard-node-metrics.service"}]
    for minute in range(sc.end + 1):
        firing = list(spark04) if minute >= 2 else []       # pending at 0 and 1
        if minute >= 12:                                     # 300 s old at 10 (595 - 295), for 2m
            firing.append(spark02)
        if 17 <= minute < 30:                                # 300 s old at 15 (900 - 599), for 2m
            firing.append(ranking)
        sc.expect[("SparkguardMetricsStale", minute)] = firing
    sc.expect_quiet([a for a in ALERTS if a not in ("SparkguardMetricsStale", "NodeExporterDown")],
                    range(sc.end + 1))
    sc.expect_quiet(["NodeExporterDown"], range(20))
    assert_passes(promtool_test(tmp_path, [sc]))


def test_a_dropped_targets_lingering_timestamps_are_not_stale(promtool, tmp_path):
    """A target Prometheus stopped scraping (a restart into a new config writes no staleness marker) keeps its
    last samples for the 5-minute lookback: its writers' timestamps look older and older without being
    stale. Measured on the incident VM, where the package's localhost:9100 paged this way."""
    end = 30
    healthy = healthy_series(end, [60 * GB] * (end + 1))
    sc = Scenario("a dropped target", on_node(healthy, "127.0.0.1:9100"), end)
    dropped = on_node(healthy, "localhost:9100")
    for s in dropped:
        s.values = s.values[:20]      # scraped up to minute 19, then never again: no marker
        if s.name == "sparkguard_node_metrics_timestamp_seconds":
            s.values = [v - 200 for v in s.values]    # node-metrics' timer wrote 200 s before each scrape
    sc.series += dropped
    sc.expect_quiet(ALERTS, range(end + 1))
    # The package's own Prometheus scraped node_exporter before sparkguard's writers existed, then was restarted
    # into sparkguard's config and rules: the dropped target has no sparkguard timestamps at all, only its last
    # up 1 and unit states, lingering (measured on the incident VM). Its last scrape is the rules' first minute.
    early = Scenario("a target dropped before sparkguard's writers ran", on_node(healthy, "127.0.0.1:9100"), end)
    early.series += [s for s in on_node(healthy, "localhost:9100") if not s.name.startswith("sparkguard_")]
    for s in early.series:
        if s.labels.get("instance") == "localhost:9100":
            s.values = s.values[:1]
    early.expect_quiet(ALERTS, range(end + 1))
    assert_passes(promtool_test(tmp_path, [sc, early]))


def test_stale_replay_has_teeth(promtool, tmp_path):
    """A 30-minute staleness limit, or no rule, fails the stale replay; so do rules that ask every node for
    the agent's timestamp (spark-03 has none and must stay quiet)."""
    def expect(sc):
        sc.expect[("SparkguardMetricsStale", 17)] = [
            {**NODE, "unit": "sparkguard-gpu-ranking.service"},
            {"instance": "spark-02:9100", "job": "node", "unit": "sparkguard-node-metrics.service"},
            {"instance": "spark-04:9100", "job": "node", "unit": "sparkguard-gpu-ranking.service"},
            {"instance": "spark-04:9100", "job": "node", "unit": "sparkguard-node-metrics.service"}]
        return sc
    assert_passes(promtool_test(tmp_path, [expect(stale_scenario())]))
    late = promtool_test(tmp_path, [expect(stale_scenario())],
                         rules_text=render_alert_rules(AlertThresholds(gpu_ranking_stale_after="30m")))
    assert late.returncode != 0
    doc = rules_doc(render_alert_rules())
    rule = next(r for r in doc["groups"][0]["rules"] if r["alert"] == "SparkguardMetricsStale")
    rule["expr"] = rule["expr"].replace(
        'group without(name, state, type) (node_systemd_unit_state{job="node",name="sparkguard-gpu-ranking.service"})',
        'up{job="node"} == 1')
    everywhere = promtool_test(tmp_path, [expect(stale_scenario())], rules_text=yaml.safe_dump(doc))
    assert everywhere.returncode != 0 and "spark-03" in everywhere.stdout + everywhere.stderr
    doc["groups"][0]["rules"] = [r for r in doc["groups"][0]["rules"] if r["alert"] != "SparkguardMetricsStale"]
    assert promtool_test(tmp_path, [expect(stale_scenario())], rules_text=yaml.safe_dump(doc)).returncode != 0
