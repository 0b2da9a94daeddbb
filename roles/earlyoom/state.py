"""Desired state of role ``earlyoom``."""

from __future__ import annotations

import json
import shlex

from sparkguard.domain.memory import victim_order
from sparkguard.hostconfig import settings_of
from sparkguard.layout import BIN_DIR, CONFIG_DIR, LIB_DIR, STATE_DIR, TEXTFILE_DIR, dropin_path, unit_path
from sparkguard.role import RoleContext, shipped_program
from sparkguard.state import DesiredState, Directory, Ensure, ManagedFile, Service
from sparkguard.templating import render_template, sandbox

from ..swap.interface import TRAINING_JOB_PREFIX
from ..vllm.interface import SERVING_UNIT_PREFIX
from ..vllm.settings import VllmSettings
from .guard import GuardChoice, choose_guard
from .names import SERVING_UNITS, avoid_regex, launcher_regex, prefer_regex, serving_regex
from .settings import EarlyoomSettings

# (packages, files, services) of one low-memory guard.
GuardParts = tuple[tuple[str, ...], tuple[ManagedFile, ...], tuple[Service, ...]]

DEFAULTS_FILE = "/etc/default/earlyoom"
DROPIN = dropin_path("earlyoom.service")
SPOOL_DIR = f"{STATE_DIR}/earlyoom-events"
MARKS_DIR = f"{STATE_DIR}/guard-marks"
COUNTS_FILE = f"{STATE_DIR}/earlyoom-kills.counts"
TEXTFILE = f"{TEXTFILE_DIR}/sparkguard_earlyoom.prom"
NOTIFY = f"{LIB_DIR}/earlyoom-notify"
RECORDER = f"{LIB_DIR}/guard-record"
COLLECTOR = f"{LIB_DIR}/earlyoom-kills-collect"
CHECKER = f"{LIB_DIR}/earlyoom-check-args"
OOM_FIRST = f"{BIN_DIR}/sparkguard-oom-first"
KILLS_PATH_UNIT = "sparkguard-earlyoom-kills.path"
KILLS_SERVICE_UNIT = "sparkguard-earlyoom-kills.service"
NOHANG_CONF = "/etc/nohang/nohang.conf"
NOHANG_DROPIN = dropin_path("nohang.service")
NOHANG_ACTION = f"{LIB_DIR}/nohang-action"
RANKING_AGENT = f"{LIB_DIR}/gpu-ranking"
RANKING_CONFIG = f"{CONFIG_DIR}/gpu-ranking.json"
RANKING_UNIT = "sparkguard-gpu-ranking.service"
RANKING_STATUS = "/run/sparkguard/gpu-ranking.json"
# Every process of every GPU job the agent knows, "PID START JOB UNIT NAME", kept a while after a job is
# gone: the guard's recorder attributes a kill of any of them to the job.
JOBS_FILE = "/run/sparkguard/gpu-jobs"
RANKING_TEXTFILE = f"{TEXTFILE_DIR}/sparkguard_gpu_ranking.prom"
# Compute device nodes a GPU process holds from CUDA/ROCm init on (display servers open only the others).
DEVICE_PATHS = (
    "/dev/nvidia-uvm",        # CUDA (NVIDIA's open and proprietary drivers; DGX Spark, GH200, Jetson Thor)
    "/dev/kfd",               # ROCm compute (AMD Strix Halo)
    "/dev/nvhost-ctrl-gpu",   # Jetson's nvgpu driver (Orin)
)



def _shipped(name: str) -> str:
    """A node-side program of this role, shipped as it is (roles/earlyoom/files/NAME)."""
    return shipped_program(__file__, name).read_text()


def threshold_args(settings: EarlyoomSettings) -> list[str]:
    """-m/-s lines. Swap is made irrelevant (-s 100,100): a unified-memory node must not thrash first."""
    return ["-m", f"{_num(settings.term_percent)},{_num(settings.kill_percent)}", "-s", "100,100"]


def earlyoom_args(settings: EarlyoomSettings) -> list[str]:
    args = threshold_args(settings)
    args += ["-r", str(settings.report_interval_s)]
    args += ["--prefer", prefer_regex(settings.prefer_extra, settings.prefer_plain_python)]
    args += ["--avoid", avoid_regex(settings.avoid_extra)]
    if settings.kill_process_group:
        args.append("-g")
    args += ["-N", NOTIFY]
    return args


def _num(value: float) -> str:
    return f"{value:g}"


def _gib(memory_total_bytes: int | None, percent: float) -> str:
    if not memory_total_bytes:
        return "?"
    return f"{memory_total_bytes * percent / 100 / 2**30:.1f}"


def ranking_config(settings: EarlyoomSettings) -> str:
    """The agent's inputs, as JSON: the bands and names are sparkguard's, never re-typed on the node."""
    return json.dumps({
        "interval_s": settings.gpu_ranking_interval_s,
        "holder_base": victim_order.HOLDER_BASE_ADJ,
        "holder_span": victim_order.HOLDER_SPAN,
        "avoid_regex": avoid_regex(settings.avoid_extra),
        "serving_regex": serving_regex(settings.serving_extra),
        "launcher_regex": launcher_regex(settings.prefer_extra),
        "training_unit": TRAINING_JOB_PREFIX,
        "serving_units": [f"{SERVING_UNIT_PREFIX}*.service", *SERVING_UNITS, *settings.serving_units_extra],
        "device_paths": list(DEVICE_PATHS),
        "blind_after_s": 30,
        "status_file": RANKING_STATUS,
        "jobs_file": JOBS_FILE,
        "textfile": RANKING_TEXTFILE,
    }, indent=2, sort_keys=True) + "\n"


def ranking_files(settings: EarlyoomSettings) -> tuple[ManagedFile, ...]:
    source = _shipped("gpu_ranking.py")
    return (
        ManagedFile(RANKING_AGENT, source, mode="0755",
                    validate="python3 -c \"import ast, sys; ast.parse(open(sys.argv[1]).read())\" {path}"),
        ManagedFile(RANKING_CONFIG, ranking_config(settings),
                    validate="python3 -c \"import json, sys; json.load(open(sys.argv[1]))\" {path}"),
        ManagedFile(unit_path(RANKING_UNIT), render_template(
            "earlyoom/gpu-ranking.service.j2", agent=RANKING_AGENT, config=RANKING_CONFIG,
            sandbox=sandbox(("/run/sparkguard", TEXTFILE_DIR), "CAP_DAC_OVERRIDE CAP_DAC_READ_SEARCH CAP_SYS_PTRACE",
                            devices=True)),
            validate="systemd-analyze verify {path}"),
    )


def _lines(settings: EarlyoomSettings, total: int | None) -> dict[str, str]:
    """The lines as the guard's config comments state them, for the reviewer."""
    return dict(term_percent=_num(settings.term_percent), kill_percent=_num(settings.kill_percent),
                term_gib=_gib(total, settings.term_percent), kill_gib=_gib(total, settings.kill_percent),
                total_gib=f"{total / 2**30:.1f}" if total else "?")


def earlyoom_guard(settings: EarlyoomSettings, total: int | None, paths: dict[str, str]) -> GuardParts:
    """earlyoom 1.7: -m lines of MemTotal; the -N hook records each kill. (packages, files, services)"""
    args = earlyoom_args(settings)
    defaults = render_template(
        "earlyoom/default.j2", args=" ".join(shlex.quote(a) for a in args), **_lines(settings, total),
        prefer=prefer_regex(settings.prefer_extra, settings.prefer_plain_python), avoid=avoid_regex(settings.avoid_extra),
    )
    files = (
        ManagedFile(NOTIFY, render_template("earlyoom/notify.sh.j2", **paths), mode="0755", validate="sh -n {path}"),
        ManagedFile(CHECKER, _shipped("check-args.sh"), mode="0755", validate="sh -n {path}"),
        ManagedFile(DROPIN, render_template("earlyoom/dropin.conf.j2", unit="earlyoom.service",
                                            **{**paths, "marks_dir": None})),
        # The checker gets the arguments as words, never by sourcing the file (no inventory value is evaluated).
        ManagedFile(DEFAULTS_FILE, defaults,
                    validate=f"{CHECKER} {{path}} " + " ".join(shlex.quote(a) for a in args)),
    )
    return ("earlyoom",), files, (Service("earlyoom.service", restart_on=(DEFAULTS_FILE, DROPIN, NOTIFY)),)


def nohang_action(settings: EarlyoomSettings) -> str:
    """The action program's command line in nohang.conf, before nohang's own words (``term $PID``,
    ``killed $PID $NAME``): its values come as arguments (roles/earlyoom/files/nohang-action.sh), never a template.
    Every word is one of the role's fixed paths: nohang shlex-splits the line."""
    scope = "group" if settings.kill_process_group else "process"
    return " ".join((NOHANG_ACTION, scope, RECORDER, SPOOL_DIR, JOBS_FILE, MARKS_DIR))


def nohang_config(settings: EarlyoomSettings, total: int | None, serving_adj: int) -> str:
    return render_template(
        "earlyoom/nohang.conf.j2", program=NOHANG_ACTION, action=nohang_action(settings), serving_adj=serving_adj,
        **_lines(settings, total),
        prefer=prefer_regex(settings.prefer_extra, settings.prefer_plain_python), avoid=avoid_regex(settings.avoid_extra),
        report="True" if settings.report_interval_s else "False",
        report_interval=settings.report_interval_s or 60,
    )


def nohang_guard(settings: EarlyoomSettings, total: int | None, paths: dict[str, str],
                 serving_adj: int) -> GuardParts:
    """nohang: lines of MemTotal, the same ranking; every action goes through the recording action script."""
    files = (
        ManagedFile(NOHANG_ACTION, _shipped("nohang-action.sh"), mode="0755", validate="sh -n {path}"),
        ManagedFile(NOHANG_DROPIN, render_template("earlyoom/dropin.conf.j2", unit="nohang.service", **paths)),
        ManagedFile(NOHANG_CONF, nohang_config(settings, total, serving_adj),
                    validate="nohang --check --config {path}"),
    )
    services = (
        Service("nohang.service", restart_on=(NOHANG_CONF, NOHANG_DROPIN, NOHANG_ACTION)),
        # Debian's package enables both of its units; they conflict, and only one may guard the node.
        Service("nohang-desktop.service", enabled=None, running=False, masked=True),
    )
    return ("nohang",), files, services


def only_guard(choice: GuardChoice) -> Ensure:
    """Switching guards leaves exactly one running: the others are stopped and disabled."""
    others = " ".join(shlex.quote(u) for u in choice.others)
    return Ensure(
        description=f"{choice.guard} is the only low-memory guard",
        check=f"for u in {others}; do systemctl is-active -q $u && exit 1; systemctl is-enabled -q $u && exit 1; done; true",
        # One unit at a time: systemctl gives up on the whole list if one unit file does not exist.
        fix=f"for u in {others}; do systemctl disable --now $u 2>/dev/null; done; true",
    )


# systemd-oomd: Ubuntu's desktop images (DGX OS) run it; it kills whole cgroups by PSI, ignoring oom_score_adj.
OOMD_UNITS = ("systemd-oomd.service", "systemd-oomd.socket")


def no_second_guard() -> Ensure:
    """systemd-oomd, where installed, is stopped and masked: one guard decides who dies (earlyoom.systemd_oomd)."""
    units = " ".join(OOMD_UNITS)
    return Ensure(
        description="systemd-oomd is not a second guard (stopped and masked)",
        # is-enabled prints nothing (old systemd) or not-found for a unit that is not installed: nothing to do.
        check=f"for u in {units}; do systemctl is-active -q $u && exit 1; "
              f"case \"$(systemctl is-enabled $u 2>/dev/null)\" in ''|masked|not-found) ;; *) exit 1 ;; esac; done; true",
        fix=f"for u in {units}; do systemctl cat $u >/dev/null 2>&1 || continue; systemctl disable -q --now $u; "
            f"systemctl mask -q $u; done; true",
    )


def desired_state(ctx: RoleContext) -> DesiredState:
    settings: EarlyoomSettings = ctx.settings("earlyoom")
    total = ctx.node.memory_total_bytes
    choice = choose_guard(settings, ctx.node.live)
    paths = {"spool_dir": SPOOL_DIR, "collector": COLLECTOR, "recorder": RECORDER, "jobs_file": JOBS_FILE,
             "counts_file": COUNTS_FILE, "textfile": TEXTFILE,
             "guard": choice.guard, "marks_dir": MARKS_DIR, "collector_unit": KILLS_SERVICE_UNIT}
    # Serving's band is the vllm role's oom_score_adj (one value, wherever a server runs).
    serving_adj = settings_of(ctx.config, VllmSettings).oom_score_adj
    if choice.guard == "nohang":
        packages, guard_files, guard_services = nohang_guard(settings, total, paths, serving_adj)
    else:
        packages, guard_files, guard_services = earlyoom_guard(settings, total, paths)
    ranking = ranking_files(settings) if settings.gpu_ranking else ()
    ranking_services = (Service(RANKING_UNIT, restart_on=tuple(f.path for f in ranking)),) if ranking else ()
    return DesiredState(
        role="earlyoom",
        # The ranking agent is a python3 script (DGX OS and Ubuntu ship python3; a minimal Debian may not).
        packages=packages + (("python3",) if ranking else ()),
        directories=(Directory(SPOOL_DIR, mode="1733"),)
        + ((Directory(MARKS_DIR, mode="0700"),) if choice.guard == "nohang" else ()),
        files=(
            ManagedFile(OOM_FIRST, _shipped("oom-first.sh"), mode="0755",
                        validate="sh -n {path}"),
            ManagedFile(RECORDER, _shipped("guard-record.sh"), mode="0755", validate="sh -n {path}"),
            ManagedFile(COLLECTOR, _shipped("collect.sh"), mode="0755", validate="sh -n {path}"),
            ManagedFile(unit_path(KILLS_SERVICE_UNIT), render_template(
                "earlyoom/kills.service.j2", **paths,
                # Reads what others may drop into the spool: confined to the spool, its counts and the textfile.
                sandbox=sandbox((SPOOL_DIR, MARKS_DIR, STATE_DIR, TEXTFILE_DIR), "CAP_DAC_OVERRIDE CAP_FOWNER")),
                        validate="systemd-analyze verify {path}"),
            ManagedFile(unit_path(KILLS_PATH_UNIT), render_template("earlyoom/kills.path.j2", **paths),
                        validate="systemd-analyze verify {path}"),
        ) + guard_files + ranking,
        services=(Service(KILLS_PATH_UNIT),) + guard_services + ranking_services,
        ensures=(only_guard(choice),) + ((no_second_guard(),) if settings.systemd_oomd == "disable" else ()),
    )
