"""Role swap on a VM with its own kernel and a real swap partition (never the host's swap).

The VM (tests/vm/conftest.py) boots with LABEL=sgswap in its fstab, so swap is
on at boot. Only roles base, earlyoom and swap are applied here (TCG is slow).
"""

from __future__ import annotations

import time

import pytest

from sparkguard.roles.swap.state import REAPER_GRACE_S, REAPER_SERVICE, REAPER_TIMER
from tests.conftest import REPO
from tests.vm import applying
from tests.waiting import wait_for

pytestmark = pytest.mark.vm
KEEP = {"base", "earlyoom", "swap"}
TARGET = "sparkguard-training.target"
ACTIVE_SWAPS = "tail -n +2 /proc/swaps | awk '{print $1, $5}'"


def converge(vm_node, directory, swap_vars: str):
    return applying.converge(vm_node, directory, f"    swap: {swap_vars}\n", KEEP)


def swaps(vm_node) -> str:
    return vm_node.check(ACTIVE_SWAPS).strip()


def test_on_off_on_round_trips_fstab_and_every_second_apply_is_clean(vm_node, tmp_path):
    original = vm_node.check("cat /etc/fstab")
    converge(vm_node, tmp_path / "on", "{mode: 'on', swappiness: 10}")
    assert swaps(vm_node).startswith("/dev/vdb")
    assert vm_node.check("sysctl -n vm.swappiness").strip() == "10"

    converge(vm_node, tmp_path / "off", "{mode: 'off'}")
    assert swaps(vm_node) == ""
    assert "#sparkguard-swap-off# LABEL=sgswap" in vm_node.check("cat /etc/fstab")
    assert vm_node.check("systemctl is-enabled swap.target || true").strip() == "masked"

    converge(vm_node, tmp_path / "on2", "{mode: 'on'}")
    assert vm_node.check("cat /etc/fstab") == original
    assert swaps(vm_node).startswith("/dev/vdb")
    assert vm_node.check("systemctl is-enabled swap.target || true").strip() != "masked"


def test_mode_holds_after_reboot(vm_node, tmp_path):
    converge(vm_node, tmp_path / "off", "{mode: 'off'}")
    vm_node.reboot()
    assert swaps(vm_node) == ""
    converge(vm_node, tmp_path / "training", "{mode: training-off}")
    assert swaps(vm_node).startswith("/dev/vdb")
    vm_node.reboot()
    assert swaps(vm_node).startswith("/dev/vdb")
    assert vm_node.check(f"systemctl is-active {TARGET} || true").strip() == "inactive"


@pytest.fixture(scope="module")
def training_off(vm_node, tmp_path_factory):
    """Role swap in training-off, converged once for the tests below (an apply is ~15 s under TCG)."""
    return converge(vm_node, tmp_path_factory.mktemp("training"), "{mode: training-off}")


@pytest.fixture
def training_mode(vm_node, training_off):
    """The swap that is on before a job: the module's converge, applied again only on a fresh copy of the VM
    (tests/vm/conftest.py boots one when a test left the VM unanswering)."""
    if vm_node.ssh("test -e /etc/sparkguard/train.json")[0] != 0:
        applying.apply(training_off)
    before = swaps(vm_node)
    assert before.startswith("/dev/vdb")
    assert vm_node.check(f"systemctl is-active {TARGET} || true").strip() == "inactive"
    return before


@pytest.mark.parametrize("job,expected_rc", [
    ("exit 0", 0),
    ("exit 1", 1),
    ("kill -9 $$", 137),
])
def test_swap_off_during_training_and_back_however_the_job_ends(vm_node, training_mode, job, expected_rc):
    rc, out, err = vm_node.ssh(f"sparkguard-train -- sh -c 'tail -n +2 /proc/swaps | wc -l; {job}'")
    assert rc == expected_rc, err
    assert out.strip().splitlines()[0] == "0", "swap must be off while the job runs"
    assert swaps(vm_node) == training_mode, "exactly the swap that was on comes back (device and priority)"
    assert vm_node.check(f"systemctl is-active {TARGET} || true").strip() == "inactive"


def test_swap_back_after_the_launcher_is_killed_once_the_job_ends(vm_node, training_mode):
    vm_node.ssh("(setsid sparkguard-train --name orphan -- sleep 15 > /dev/null 2>&1 &)")
    # Killed once its job runs (under TCG the launcher can take seconds to get there).
    wait_for(lambda: vm_node.check("systemctl list-units --plain --no-legend --state=active "
                                   "'sparkguard-job-orphan-*' || true").strip(), 60, "the orphan's job", every=1)
    vm_node.ssh("pkill -9 -f '[s]parkguard-train --name orphan'")
    assert swaps(vm_node) == "", "the job goes on (and swap stays off) after its launcher died"
    wait_for(lambda: swaps(vm_node) == training_mode, 60, "swap back after the orphaned job's end", every=2)


def test_swap_back_when_the_launcher_died_before_starting_its_job(vm_node, training_mode):
    """Training mode entered, then no job (the launcher killed during a long swapoff): the reaper leaves it."""
    vm_node.check(f"systemctl start {TARGET}")
    assert swaps(vm_node) == "" and vm_node.check(f"systemctl is-active {REAPER_TIMER}").strip() == "active"
    entered = time.time()
    wait_for(lambda: swaps(vm_node) == training_mode, REAPER_GRACE_S + 60, "swap back without a job", every=2)
    assert time.time() - entered >= REAPER_GRACE_S - 5, "left training mode before the launcher's grace"
    assert vm_node.check(f"systemctl is-active {TARGET} {REAPER_TIMER} || true").split() == ["inactive"] * 2
    assert "no training job holds" in vm_node.check(f"journalctl -u {REAPER_SERVICE} -o cat --no-pager")


def test_preflight_refuses_a_job_that_does_not_fit_and_swap_stays_on(vm_node, training_mode):
    rc, _, err = vm_node.ssh("sparkguard-train --peak-gib 64 -- true")
    assert rc == 75 and "refused" in err
    assert swaps(vm_node) == training_mode


# Swap used, MemAvailable, MemTotal (KiB), then whether the two hogs still run.
FILL_STATE = ("awk '/SwapTotal/{t=$2} /SwapFree/{f=$2} /MemAvailable/{a=$2} /MemTotal/{m=$2} END{print t-f, a, m}' "
              "/proc/meminfo; systemctl is-active sg-swapped sg-swapfill || true")


def hog_ready(vm_node, unit: str, args: str) -> None:
    """Start sparkguard-anon-hog as ``unit`` and wait for its "ready" line (all of its memory touched)."""
    report = f"/run/{unit}.jsonl"
    vm_node.check(f"rm -f {report}; systemd-run --unit {unit} {args} --comm {unit} --report {report}")
    deadline = time.time() + 240
    while time.time() < deadline and '"ready"' not in vm_node.check(f"cat {report} 2>/dev/null || true"):
        time.sleep(2)
    assert '"ready"' in vm_node.check(f"cat {report}"), f"{unit} never finished: {vm_node.check(FILL_STATE)}"


def test_swapoff_that_would_run_out_of_memory_is_refused_cleanly(vm_node, training_mode):
    """Swap holds more than RAM can take back: training is refused, swap is left exactly as it was.

    Built in two steps, without pressure on the whole guest (which on TCG let the kernel's OOM killer take
    the fill, and then the job rightly fitted): a hog in a 64 MiB memory cgroup pushes ~128 MiB of its own
    pages to swap; a second hog then takes what is available but 96 MiB. Swap now holds more than is
    available above earlyoom's reserve, and the guest keeps room to answer SSH.
    """
    hog = (REPO / "tools" / "sparkguard-anon-hog").read_text()
    vm_node.check("systemctl stop earlyoom && cat > /usr/local/bin/sparkguard-anon-hog <<'SGEOF'\n"
                  f"{hog}SGEOF\nchmod +x /usr/local/bin/sparkguard-anon-hog")
    try:
        swap_free_mib = int(vm_node.check("awk '/SwapFree/{print int($2/1024)}' /proc/meminfo"))
        assert swap_free_mib > 192, f"the VM's swap ({swap_free_mib} MiB free) is too small for this test"
        hog_ready(vm_node, "sg-swapped", "-p MemoryMax=64M -p MemorySwapMax=infinity sparkguard-anon-hog --mib 192")
        available_mib = int(vm_node.check("awk '/MemAvailable/{print int($2/1024)}' /proc/meminfo"))
        hog_ready(vm_node, "sg-swapfill", f"-p OOMScoreAdjust=500 sparkguard-anon-hog --mib {available_mib - 96}")
        state = vm_node.check(FILL_STATE)
        used, avail, total = (int(state.split()[i]) for i in range(3))
        assert used > 96 * 1024, f"the capped hog did not push its pages to swap: {state}"
        percent = vm_node.check("systemctl cat sparkguard-swapoff.service | grep -o 'reserve-percent [0-9]*' || true")
        reserve = total * int(percent.split()[-1] if percent.strip() else 0) // 100
        assert used + reserve > avail, f"swap would fit back into RAM, so nothing to refuse: {state}"
        rc, _, err = vm_node.ssh("sparkguard-train -- true", timeout=300)
        assert rc == 75, (err, state, vm_node.check(FILL_STATE))
        assert "refusing to turn swap off" in vm_node.check("journalctl -u sparkguard-swapoff -n 20 -o cat")
        assert swaps(vm_node) == training_mode
        assert vm_node.check(f"systemctl is-active {TARGET} || true").strip() != "active"
    finally:
        vm_node.ssh("systemctl stop sg-swapfill sg-swapped; systemctl reset-failed sg-swapfill sg-swapped "
                    f"sparkguard-swapoff {TARGET}; systemctl start earlyoom", timeout=300)
