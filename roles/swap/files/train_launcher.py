#!/usr/bin/env python3
# Managed by sparkguard (role swap): this file is shipped as it is; its values come from train.json.
"""sparkguard-train: run a training job in training mode (swap off), as the first OOM victim.

    sparkguard-train [--peak-gib N] [--docker] [--name NAME] -- CMD [ARGS...]
    sparkguard-train --status [--json]

1. Preflight: with --peak-gib, refuse unless MemAvailable, plus what entering
   training mode frees (vLLM servers shrinking or stopping, from the node's
   budget, budget.json), covers the declared peak plus earlyoom's SIGTERM
   reserve. Nothing starts, swap is not touched.
2. Enter the training target (sparkguard-training.target): swap goes off (refused cleanly if swap holds
   more than RAM can take back).
3. Run CMD as a transient systemd service sparkguard-job-NAME-TIME with
   OOMScoreAdjust=1000 (with --docker: the container, not the docker client), so the kernel and earlyoom pick it before anything
   else. Under sudo the job runs as the invoking user (with that user's HOME);
   the bookkeeping runs as root. Its output is followed here and kept in the
   journal.
   With --docker, CMD is `docker run ...`: the container is the job's. It gets
   --init (a PID 1 that passes SIGTERM on: a trainer that is PID 1 of its PID
   namespace never sees earlyoom's SIGTERM), --name sparkguard-job-NAME-TIME and
   --oom-score-adj=1000; stopping the job stops the container (docker stop), and
   it is removed (docker rm -f) however the job ends. A docker run that sets its
   own --name, --init, --oom-score-adj, --detach or a --restart policy is refused.
4. When the job ends, however it ends (exit, failure, earlyoom, kill -9), its
   ExecStopPost (as root) records the outcome and leaves training mode once no
   other job runs: swap comes back, vLLM returns to full size. A launcher killed
   before its job started leaves training mode up with no job: the target's timer
   (--leave-if-idle) leaves it within a minute.

If this launcher dies (kill -9, the SSH session drops), the JOB GOES ON; swap
returns when it ends. Ctrl-C or SIGTERM here stops the job. Exit code: the
job's (128+N when killed by signal N); 75 when refused before starting.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Role swap writes the node's layout here (roles/swap/state.py TRAIN_CONFIG); load_layout() reads it.
CONFIG = Path("/etc/sparkguard/train.json")
VLLM_UNIT = "sparkguard-vllm@{}.service"
DOCKER_STOP_S = 20
REFUSED = 75
PASS_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "VIRTUAL_ENV", "PYTHONPATH")
PASS_PREFIXES = ("CUDA_", "HF_", "TORCH", "PYTORCH_", "NCCL_", "OMP_", "TRANSFORMERS_", "WANDB_")


@dataclass(frozen=True)
class Layout:
    """Every path and name the launcher works with, from role swap's train.json: each value has one source, the
    role. Read once in main() and handed to what needs it (tests build their own)."""

    target: str              # the training target (role base)
    job_prefix: str          # each job's transient unit: PREFIX + name + time
    swapoff_service: str     # whose journal says why training mode could not start
    node_json: Path          # the node's validated settings (earlyoom's SIGTERM line)
    runs: Path               # each job's outcome, and last.json
    budget_json: Path        # the node's budget (role budget): what training mode frees
    vllm_mode_dir: Path      # which vLLM servers are in training mode now (role vllm)
    earlyoom_default_term: float  # earlyoom's SIGTERM line when node.json cannot be read

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> "Layout":
        return cls(target=str(config["training_target"]), job_prefix=str(config["job_prefix"]),
                   swapoff_service=str(config["swapoff_service"]), node_json=Path(config["node_json"]),
                   runs=Path(config["runs_dir"]), budget_json=Path(config["budget_json"]),
                   vllm_mode_dir=Path(config["vllm_mode_dir"]),
                   earlyoom_default_term=float(config["term_percent"]))


def load_layout() -> Layout:
    try:
        return Layout.from_config(json.loads(CONFIG.read_text()))
    except (OSError, ValueError, KeyError, TypeError) as error:
        say(f"{CONFIG} is missing or unreadable ({error}): apply sparkguard (role swap) to this node first")
        sys.exit(REFUSED)


def meminfo() -> dict[str, int]:
    values = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        values[key] = int(rest.split()[0]) * 1024
    return values


def term_percent(layout: Layout) -> float:
    """earlyoom's SIGTERM line from node.json (the node's validated settings)."""
    default = layout.earlyoom_default_term
    try:
        settings = json.loads(layout.node_json.read_text())["settings"]
        earlyoom = settings.get("earlyoom", {})
        return float(earlyoom.get("term_percent", default)) if earlyoom.get("enabled", True) else 0.0
    except (OSError, ValueError, KeyError):
        return default


def gib(value: float) -> str:
    return f"{value / 2**30:.1f} GiB"


def say(message: str) -> None:
    print(f"sparkguard-train: {message}", file=sys.stderr, flush=True)


def systemctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemctl", *args], capture_output=True, text=True)


def training_mode_frees(layout: Layout) -> tuple[int, list[str]]:
    """Bytes that entering training mode will free, by the node's budget: servers that shrink or stop.

    Only servers running now at full size count (one already in training mode
    frees nothing more); a missing or unreadable budget counts nothing.
    """
    try:
        budget = json.loads(layout.budget_json.read_text())
        servers = budget.get("serving", [])
    except (OSError, ValueError, AttributeError):
        return 0, []
    freed, notes = 0, []
    for server in servers if isinstance(servers, list) else []:
        try:
            name = str(server["name"])
            gain = int(server["footprint_bytes"]) - int(server["during_training_bytes"])
        except (KeyError, TypeError, ValueError):
            continue
        if gain <= 0 or (layout.vllm_mode_dir / f"{name}.mode").exists():
            continue
        if systemctl("is-active", VLLM_UNIT.format(name)).stdout.strip() != "active":
            continue
        freed += gain
        notes.append(f"{name} {gib(gain)}")
    return freed, notes


def preflight(layout: Layout, peak_gib: float | None) -> None:
    if peak_gib is None:
        return
    mem = meminfo()
    percent = term_percent(layout)
    reserve = mem["MemTotal"] * percent / 100
    need = peak_gib * 2**30 + reserve
    freed, notes = training_mode_frees(layout)
    have = mem["MemAvailable"] + freed
    freeing = f" + {gib(freed)} that training mode frees ({', '.join(notes)})" if freed else ""
    if have < need:
        say(f"refused: the job declares a peak of {peak_gib:g} GiB and {gib(reserve)} must stay free above earlyoom's "
            f"SIGTERM line ({percent:g}% of MemTotal), so it needs {gib(need)}; MemAvailable is "
            f"{gib(mem['MemAvailable'])}{freeing}. Nothing was started and swap was not touched. Shrink the job "
            f"(sparkguard estimate), stop serving, or wait for other jobs.")
        sys.exit(REFUSED)
    if freed:
        say(f"preflight: {gib(need)} needed; MemAvailable {gib(mem['MemAvailable'])}{freeing}")


def enter_training_mode(layout: Layout) -> None:
    result = systemctl("start", layout.target)
    if result.returncode != 0:
        log = subprocess.run(["journalctl", "-u", layout.swapoff_service, "-n", "5", "-o", "cat", "--no-pager"],
                             capture_output=True, text=True).stdout
        say(f"refused: training mode could not start (swap could not be turned off). Nothing was started.\n{log}")
        sys.exit(REFUSED)


# `docker run` options that take a value as the next argument (docker 24-28). Any other
# option is a flag; an option in neither table must be written --opt=value.
DOCKER_VALUE_OPTIONS = frozenset("""
-a --attach --add-host --annotation --blkio-weight --blkio-weight-device --cap-add --cap-drop --cgroup-parent
--cgroupns --cidfile -c --cpu-shares --cpu-period --cpu-quota --cpu-rt-period --cpu-rt-runtime --cpus
--cpuset-cpus --cpuset-mems --detach-keys --device --device-cgroup-rule --device-read-bps --device-read-iops
--device-write-bps --device-write-iops --dns --dns-option --dns-search --domainname --entrypoint -e --env
--env-file --expose --gpus --group-add --health-cmd --health-interval --health-retries --health-start-period
--health-start-interval --health-timeout -h --hostname --ip --ip6 --ipc --isolation --kernel-memory -l --label
--label-file --link --link-local-ip --log-driver --log-opt --mac-address -m --memory --memory-reservation
--memory-swap --memory-swappiness --mount --name --network --net --network-alias --net-alias --oom-score-adj
--pid --pids-limit --platform -p --publish --pull --restart --runtime --security-opt --shm-size --stop-signal
--stop-timeout --storage-opt --sysctl --tmpfs --ulimit -u --user --userns --uts -v --volume --volume-driver
--volumes-from -w --workdir
""".split())
DOCKER_FLAGS = frozenset("""
-d --detach --disable-content-trust -i --interactive --init --no-healthcheck --oom-kill-disable -P
--publish-all --privileged -q --quiet --read-only --rm --sig-proxy -t --tty --help
""".split())
# Options sparkguard sets itself; the reason each may not come from the command line.
DOCKER_OWNED = {
    "--name": "sparkguard names the container after the job, to stop and remove it",
    "--init": "sparkguard adds --init so the trainer is not PID 1 (PID 1 ignores earlyoom's SIGTERM)",
    "--oom-score-adj": "sparkguard sets --oom-score-adj=1000 so the container is the first OOM victim",
    "-d": "a detached container would outlive the job; the job must own it",
    "--detach": "a detached container would outlive the job; the job must own it",
    "--restart": "a restart policy would bring the container back after earlyoom or a stop",
}


def docker_options(args: list[str]) -> tuple[list[str], list[str]]:
    """Split `docker run`'s arguments into (options, [IMAGE, CMD...]); exits 2 on what it cannot own."""
    options: list[str] = []
    index = 0
    while index < len(args):
        arg = args[index]
        if arg == "--" or not arg.startswith("-") or arg == "-":
            break
        name = arg.split("=", 1)[0]
        if name.startswith("--"):
            names = [name]
        else:                                   # -it, -itd, -e=X, -eX
            names = [f"-{c}" for c in name[1:]] if all(f"-{c}" in DOCKER_FLAGS for c in name[1:]) else [name[:2]]
        for one in names:
            restart = arg.split("=", 1)[1] if "=" in arg else "".join(args[index + 1:index + 2])
            if one in DOCKER_OWNED and not (one == "--restart" and restart == "no"):
                docker_refused(f"{arg}: {DOCKER_OWNED[one]}")
        takes_value = names == [name] and name in DOCKER_VALUE_OPTIONS and "=" not in arg and (
            name.startswith("--") or len(arg) == 2)
        if names == [name] and name not in DOCKER_VALUE_OPTIONS and name not in DOCKER_FLAGS:
            docker_refused(f"{arg}: not an option sparkguard-train knows; write it as {name}=VALUE if it takes a value")
        options.append(arg)
        if takes_value:
            if index + 1 >= len(args):
                docker_refused(f"{arg} needs a value")
            options.append(args[index + 1])
            index += 1
        index += 1
    rest = args[index + 1:] if index < len(args) and args[index] == "--" else args[index:]
    if not rest:
        docker_refused("no image given")
    return options, rest


def docker_refused(why: str) -> None:
    say(f"refused: docker run {why}. Nothing was started.")
    sys.exit(2)


def job_command(cmd: list[str], docker: bool, container: str) -> list[str]:
    if not docker:
        return cmd
    if len(cmd) < 2 or Path(cmd[0]).name != "docker" or cmd[1] != "run":
        say("--docker expects CMD to be `docker run ...`")
        sys.exit(2)
    options, image_and_command = docker_options(cmd[2:])
    # --rm is dropped: docker would remove the container before its exit code is read;
    # the job removes it itself (docker rm -f) however it ends.
    options = [option for option in options if option != "--rm"]
    return [cmd[0], "run", "--init", f"--name={container}", "--oom-score-adj=1000", *options, *image_and_command]


def literal(arg: str) -> str:
    """systemd-run expands $VAR in the command line; $$ is a literal $."""
    return arg.replace("$", "$$")


def job_user() -> tuple[list[str], dict[str, str]]:
    """Under sudo: the invoking user's uid, gid and HOME for the job (sudo may have set HOME=/root)."""
    if not (os.environ.get("SUDO_UID") and os.geteuid() == 0):
        return [], {}
    import pwd

    uid = int(os.environ["SUDO_UID"])
    gid = int(os.environ.get("SUDO_GID", uid))
    try:
        entry = pwd.getpwuid(uid)
        identity = {"HOME": entry.pw_dir, "USER": entry.pw_name, "LOGNAME": entry.pw_name}
    except KeyError:
        identity = {}
    return [f"--uid={uid}", f"--gid={gid}"], identity


def run_job(layout: Layout, cmd: list[str], unit: str, docker: bool) -> int:
    self_path = Path(sys.argv[0]).resolve()
    env = {k: v for k, v in os.environ.items() if k in PASS_ENV or k.startswith(PASS_PREFIXES)}
    user, identity = ([], {}) if docker else job_user()   # the docker client runs as root, like `sudo docker`
    env.update(identity)
    container = unit.removesuffix(".service")
    # "+": the bookkeeping runs as root even when the job runs as the sudo user (it writes
    # the runs directory and stops the target).
    stop = []
    if docker:
        stop = [f"--property=ExecStop=+{self_path} --stop-container {container}",
                f"--property=TimeoutStopSec={DOCKER_STOP_S + 40}"]
    finish = f"+{self_path} --finished {unit}" + (f" --container {container}" if docker else "")
    # The docker client holds none of the job's memory: the container is marked (--oom-score-adj=1000)
    # and the client is left out, so earlyoom's first SIGTERM goes to the trainer, not to a handle.
    mark = [] if docker else ["--property=OOMScoreAdjust=1000"]
    run = ["systemd-run", "--quiet", "--wait", "--collect", f"--unit={unit}",
           f"--description=sparkguard training job: {' '.join(cmd)[:200]}",
           *mark, f"--property=Requires={layout.target}", f"--property=After={layout.target}",
           *stop, f"--property=ExecStopPost={finish}",
           f"--working-directory={os.getcwd()}", *user, *(f"--setenv={k}={v}" for k, v in sorted(env.items())),
           "--", *(literal(arg) for arg in cmd)]
    # Only the job's own output (not systemd's notes about the unit); it stays in the journal too.
    follower = subprocess.Popen(["journalctl", "--follow", "--quiet", "-o", "cat", "--since", "now",
                                 f"_SYSTEMD_UNIT={unit}"])
    waiter = subprocess.Popen(run)

    def stop_job(signum: int, _frame: Any) -> None:
        say(f"stopping {unit} (signal {signum})")
        systemctl("stop", "--no-block", unit)

    signal.signal(signal.SIGINT, stop_job)
    signal.signal(signal.SIGTERM, stop_job)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a dropped SSH session does not stop the job
    waiter.wait()
    time.sleep(0.5)
    follower.terminate()
    record = read_record(layout, unit)
    if record is None:
        say(f"{unit} ended; no outcome recorded (see journalctl -u {unit})")
        return 1
    return report(record)


def read_record(layout: Layout, unit: str, wait_s: float = 5.0) -> dict[str, Any] | None:
    path = layout.runs / f"{unit}.json"
    deadline = time.time() + wait_s
    while time.time() < deadline:
        if path.exists():
            record: dict[str, Any] = json.loads(path.read_text())
            return record
        time.sleep(0.1)
    return None


def report(record: dict[str, Any]) -> int:
    code = int(record["exit_code"])
    if record.get("killed_by_earlyoom"):
        say(f"the job was KILLED BY EARLYOOM (SIGTERM/SIGKILL at low memory); see journalctl -u earlyoom -u nohang. "
            f"Exit {code}.")
    elif record["result"] != "success":
        say(f"the job ended: {record['result']} ({record['how']} {record['status']}), exit {code}")
    say(f"training mode left; swap: {swap_summary()}")
    return code


def swap_summary() -> str:
    lines = Path("/proc/swaps").read_text().splitlines()[1:]
    return ", ".join(line.split()[0] for line in lines) or "none active"


def docker(*args: str, timeout: float = DOCKER_STOP_S + 30) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as error:
        return subprocess.CompletedProcess(["docker", *args], 1, "", str(error))


def container_state(container: str) -> dict[str, Any]:
    """Running, ExitCode, Pid of a container; {} when docker does not know it."""
    result = docker("inspect", "--format", "{{json .State}}", container, timeout=30)
    try:
        return json.loads(result.stdout) if result.returncode == 0 else {}
    except ValueError:
        return {}


def stop_container(layout: Layout, container: str) -> int:
    """ExecStop of a --docker job: stop the container (SIGTERM to its init, SIGKILL after {DOCKER_STOP_S} s).

    systemd runs it however the job ends; a mark says whether the container was
    still running, i.e. whether this stop (not earlyoom) ended it.
    """
    state = container_state(container)
    if state.get("Running"):
        (layout.runs / f"{container}.stopped").write_text(time.strftime("%Y-%m-%d %H:%M:%S %Z") + "\n")
        docker("stop", f"--time={DOCKER_STOP_S}", container)
    return 0


def earlyoom_kills_since(started: str, patient: bool) -> list[str]:
    """The low-memory guard's kill lines since the job started (earlyoom's own, or nohang's action script's).

    A job ended by SIGTERM/SIGKILL may be ending because of earlyoom, whose line
    can reach the journal a moment after the job is gone: look again for a few
    seconds before saying it was not earlyoom.
    """
    deadline = time.monotonic() + (5.0 if patient else 0.0)
    while True:
        # The guard's own lines, and the kill collector's (sparkguard-earlyoom-kills.service), which names the
        # job of every victim the GPU ranking agent knew: a worker or launcher killed first is still this job.
        log = subprocess.run(["journalctl", "-u", "earlyoom", "-u", "nohang", "-u", "sparkguard-earlyoom-kills",
                              "--since", started, "-o", "cat", "--no-pager"], capture_output=True, text=True).stdout
        kills = [line for line in log.splitlines()
                 if ("sending SIG" in line and " to process " in line) or "sparkguard: nohang sent SIG" in line
                 or " of job " in line]
        if kills or time.monotonic() >= deadline:
            return kills
        time.sleep(0.5)


def finished(layout: Layout, unit: str, container: str | None) -> int:
    """ExecStopPost of every job (as root): record the outcome, then leave training mode if no job is left."""
    how = os.environ.get("EXIT_CODE", "")
    status = os.environ.get("EXIT_STATUS", "")
    result = os.environ.get("SERVICE_RESULT", "")
    if how == "exited":
        exit_code = int(status or 0)
    else:
        number = getattr(signal, f"SIG{status}", None)
        exit_code = 128 + int(number) if number is not None else 1
    # KEY=value: with --value, systemctl prints the properties in its own order, not the order asked.
    show = dict(line.partition("=")[::2] for line in systemctl(
        "show", unit, "-p", "ExecMainPID", "-p", "ExecMainStartTimestamp").stdout.splitlines())
    pid = show.get("ExecMainPID", "").strip()
    started = show.get("ExecMainStartTimestamp", "").strip()
    kills = earlyoom_kills_since(started, patient=exit_code in (137, 143)) if started else []
    record = {
        "unit": unit, "result": result, "how": how, "status": status, "exit_code": exit_code,
        "main_pid": pid, "started": started, "ended": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "killed_by_earlyoom": any(f" to process {pid} " in line or f"(pid {pid}," in line or f" of job {unit} (" in line
                                  for line in kills) if pid else False,
        "earlyoom_kills_during_job": kills,
    }
    if container:
        record.update(container_outcome(layout, container, kills))
    layout.runs.mkdir(parents=True, exist_ok=True)
    for path in (layout.runs / f"{unit}.json", layout.runs / "last.json"):
        path.write_text(json.dumps(record, indent=2) + "\n")
        path.chmod(0o644)
    if not running_jobs(layout, ("active", "activating", "reloading"), besides=unit):
        systemctl("stop", "--no-block", layout.target)
    return 0


def running_jobs(layout: Layout, states: tuple[str, ...], besides: str = "") -> list[str]:
    """Job units in one of ``states`` (systemd's ACTIVE column), other than ``besides``."""
    out = systemctl("list-units", "--plain", "--no-legend", f"--state={','.join(states)}",
                    f"{layout.job_prefix}*.service").stdout
    names = [line.split()[0] for line in out.splitlines() if line.split()]
    return [name for name in names if name.startswith(layout.job_prefix) and name != besides]


def leave_if_idle(layout: Layout) -> int:
    """The reaper timer's check while training mode is on: leave it when no job holds it.

    A job's end leaves training mode (finished()), but a launcher killed between
    entering training mode and starting its job (kill -9, a dropped session during a
    long swapoff) leaves the target up with no job whose end would stop it: swap
    would stay off until someone noticed. A job that starts afterwards pulls the
    target back in (Requires=), so leaving is always safe. Jobs that are stopping
    still count: their own end leaves training mode.
    """
    if systemctl("is-active", layout.target).stdout.strip() != "active":
        return 0
    if running_jobs(layout, ("active", "activating", "deactivating", "reloading")):
        return 0
    say(f"no training job holds {layout.target} (its launcher ended before starting one): leaving training mode")
    systemctl("stop", "--no-block", layout.target)
    return 0


def container_outcome(layout: Layout, container: str, kills: list[str]) -> dict[str, Any]:
    """What became of a --docker job's container; it is removed here however the job ended.

    earlyoom's log names the host PID it signalled, and the container's processes
    are gone by now, so "killed by earlyoom" is judged from evidence: earlyoom
    sent a signal during the job, the container ended by SIGTERM or SIGKILL
    (exit 143/137), and this job's own stop did not end it.
    """
    state = container_state(container)
    stopped_mark = layout.runs / f"{container}.stopped"
    stopped_by_job = stopped_mark.exists()
    stopped_mark.unlink(missing_ok=True)
    if state.get("Running"):
        # The docker client died (kill -9) without systemd running ExecStop: stop it the same way.
        stopped_by_job = True
        docker("stop", f"--time={DOCKER_STOP_S}", container)
        state = container_state(container)
    removed = docker("rm", "--force", container)
    gone = removed.returncode == 0 or "No such container" in removed.stderr
    exit_code = state.get("ExitCode")
    outcome = {
        "container": container,
        "container_exit_code": exit_code,
        "container_oom_killed": bool(state.get("OOMKilled")),
        "container_stopped_by_job": stopped_by_job,
        "container_removed": gone,
    }
    if kills and exit_code in (137, 143) and not stopped_by_job:
        outcome["killed_by_earlyoom"] = True
    if not gone:
        say(f"could not remove container {container}: {removed.stderr.strip()[:200]}")
    return outcome


def status(layout: Layout, as_json: bool) -> int:
    mode = systemctl("is-active", layout.target).stdout.strip()
    jobs = [line.split()[0] for line in systemctl("list-units", "--plain", "--no-legend", "--state=active",
                                                  f"{layout.job_prefix}*.service").stdout.splitlines() if line.strip()]
    last_path = layout.runs / "last.json"
    last = json.loads(last_path.read_text()) if last_path.exists() else None
    data = {"training_mode": mode == "active", "swap": swap_summary(), "jobs": jobs, "last_run": last}
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        print(f"training mode: {'on' if data['training_mode'] else 'off'}")
        print(f"swap:          {data['swap']}")
        print(f"running jobs:  {', '.join(jobs) or 'none'}")
        if last:
            verdict = "killed by earlyoom" if last["killed_by_earlyoom"] else f"{last['result']}, exit {last['exit_code']}"
            print(f"last run:      {last['unit']}: {verdict} (ended {last['ended']})")
        else:
            print("last run:      none")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="sparkguard-train", description=__doc__.splitlines()[0])
    parser.add_argument("--peak-gib", type=float, help="the job's declared peak memory (sparkguard estimate)")
    parser.add_argument("--docker", action="store_true",
                        help="CMD is `docker run ...`: the job owns the container (--init, --name, --oom-score-adj=1000,"
                             " stopped and removed with the job)")
    parser.add_argument("--name", default="train", help="job name, part of the unit name")
    parser.add_argument("--status", action="store_true", help="training mode, swap state, the last run's outcome")
    parser.add_argument("--json", action="store_true", help="with --status: JSON")
    parser.add_argument("--finished", metavar="UNIT", help=argparse.SUPPRESS)
    parser.add_argument("--container", help=argparse.SUPPRESS)
    parser.add_argument("--stop-container", metavar="CONTAINER", help=argparse.SUPPRESS)
    parser.add_argument("--leave-if-idle", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    layout = load_layout()
    if args.finished:
        return finished(layout, args.finished, args.container)
    if args.stop_container:
        return stop_container(layout, args.stop_container)
    if args.leave_if_idle:
        return leave_if_idle(layout)
    if args.status:
        return status(layout, args.json)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("give the job after --, e.g. sparkguard-train --peak-gib 80 -- python3 train.py")
    name = "".join(c if c.isalnum() or c in "-_" else "-" for c in args.name)[:40] or "train"
    unit = f"{layout.job_prefix}{name}-{time.strftime('%Y%m%d-%H%M%S')}.service"
    cmd = job_command(cmd, args.docker, unit.removesuffix(".service"))
    preflight(layout, args.peak_gib)
    enter_training_mode(layout)
    return run_job(layout, cmd, unit, args.docker)


if __name__ == "__main__":
    sys.exit(main())
