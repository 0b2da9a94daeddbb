"""Watchdog helpers shared by the recovery VM tests (softdog on the cloud kernel, i6300esb on the generic one)."""

from __future__ import annotations

import time

# The stall tests' RuntimeWatchdogSec, half the role's default (60 s; the sandbox audit test checks that one
# on a node): while the guest is stalled, TCG spins every vCPU on a host core until the watchdog fires, in
# the suite's CPU-bound first phase. 30 s still leaves systemd 15 s between pings, far more than PID 1 ever
# went without CPU in these guests outside the stall.
RUNTIME_S = 30
RUNTIME_SHOWN = "30s"  # how `systemctl show -p RuntimeWatchdogUSec` writes RUNTIME_S
# The settings that arm it: role recovery's `watchdog` block, inside a `recovery:` mapping of the inventory.
WATCHDOG_VARS = f"watchdog: {{runtime_s: {RUNTIME_S}}}"

# Every CPU taken by a SCHED_FIFO 99 spinner with RT throttling off: PID 1 (and sshd) get no
# CPU at all, only interrupts run. This is the "userspace stall" the watchdog exists for;
# nothing else in the guest reboots it (no panic, no hung task: the spinners are runnable).
STALL_SCRIPT = """#!/bin/sh
# Each spinner is started while CPUs are still free, so its own `taskset` gets to run;
# the spawner itself pins nothing (pinned to a CPU that a spinner then takes, it would
# never get to start the next one).
sysctl -q -w kernel.sched_rt_runtime_us=-1
i=0
while [ "$i" -lt "$(nproc)" ]; do
  taskset -c "$i" chrt -f 99 sh -c 'while :; do :; done' &
  i=$((i + 1))
  sleep 0.5
done
wait
"""


def watchdog_state(node) -> list[str]:
    """[RuntimeWatchdogUSec, softdog loaded (0/1), softdog in modules-load.d (0/1), 'dev' if /dev/watchdog0]."""
    return node.check("systemctl show -p RuntimeWatchdogUSec --value; lsmod | awk '$1 == \"softdog\"' | wc -l; "
                      "cat /etc/modules-load.d/*sparkguard* 2>/dev/null | grep -c softdog; "
                      "test -e /dev/watchdog0 && echo dev").split()


def stall_and_wait_for_reboot(node, timeout: float = 400) -> tuple[float, str]:
    """Starve the guest's userspace; return (seconds until SSH answers from a new boot, new console text)."""
    node.check(f"cat > /root/sg-stall <<'SGEOF'\n{STALL_SCRIPT}SGEOF\nchmod +x /root/sg-stall")
    console_before = len(node.console_log.read_bytes())
    old = node.boot_id()
    started = time.monotonic()
    node.check("setsid -f sh -c 'sleep 1; /root/sg-stall' </dev/null >/dev/null 2>&1", timeout=30)
    time.sleep(5)
    assert not node.responsive(patience=10), "the stall did not stop the guest's userspace"
    node.wait_for_reboot(old, timeout)
    console = node.console_log.read_bytes()[console_before:].decode(errors="replace")
    return time.monotonic() - started, console
