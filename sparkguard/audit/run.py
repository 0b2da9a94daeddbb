"""``sparkguard audit``, run: connect to every host, run the probe once each, judge. Read-only.

Per host, ONE command over SSH (one round trip after the connection is set up):
a probe script (``probe``) built from the host's desired states (``render.host_states``)
prints, line by line, the sha256/mode/owner of every managed file, each
package's status, each service's enabled/active state, each sysctl's live value,
the result of each ``Ensure`` check (the same check apply runs before fixing),
and the runtime facts the protections rest on (earlyoom's command line, sshd's
oom_score_adj, PID 1's watchdog, the journal, cgroup memory protection, ...).
Everything is then judged offline (``judge``). The probe writes nothing on the node.
"""

from __future__ import annotations

import time

from pyinfra.api import Config, State
from pyinfra.api.connect import disconnect_all
from pyinfra.api.facts import get_fact
from pyinfra.api.host import Host
from pyinfra.api.state import StateStage
from pyinfra.connectors.sshuserclient.client import get_host_keys
from pyinfra.context import ctx_host, ctx_state

from ..engine.probe import parse_output
from ..engine.render import host_states
from ..inventory.loader import Inventory
from ..inventory.selection import select_hosts
from ..run import connection, liveness, tunables
from ..run.runner import ConnectErrors, connect_hosts, explain_connect_error, quiet_greenlets, quiet_pyinfra, ssh_client
from .judge import evaluate
from .probe import AuditProbe, build_probe, probe_states
from .result import COMMANDS_PER_HOST, AuditResult, HostAudit


def run_audit(inventory: Inventory, limit: list[str] | None = None, verbose: bool = False) -> AuditResult:
    """Connect to every host (in parallel), run one probe each, compare. Changes nothing."""
    import pyinfra

    started = time.monotonic()
    pyinfra.is_cli = False
    quiet_pyinfra(verbose)
    connect_timeout, silence_s = tunables.CONNECT_TIMEOUT.seconds(), tunables.SSH_SILENCE.seconds()
    get_host_keys.cache.clear()
    entries = select_hosts(inventory, limit)
    scripts = {e.name: build_probe(e, probe_states(e)) for e in entries}
    py_inventory = connection.inventory([(h.name, h.pyinfra_data()) for h in entries])
    state = State()
    state.init(py_inventory, Config(CONNECT_TIMEOUT=connect_timeout))
    errors = ConnectErrors()
    state.add_callback_handler(errors)
    state.set_stage(StateStage.Connect)
    results = {e.name: HostAudit(e.name) for e in entries}
    watches = liveness.Watches([])
    try:
        connect_hosts(state, entries, errors)
        watches = liveness.watch_clients({e.name: ssh_client(state, e.name) for e in entries}, silence_s)

        def probe(host: Host) -> tuple[str, str, float]:
            began = time.monotonic()
            with ctx_host.use(host):
                output = get_fact(state, host, AuditProbe, kwargs={"script": scripts[host.name]})
            return host.name, output, time.monotonic() - began

        with ctx_state.use(state), quiet_greenlets(not verbose):
            greenlets = [state.pool.spawn(probe, host) for host in state.inventory.get_active_hosts()
                         if host.name not in errors.errors]
            state.pool.join()
        for greenlet in greenlets:
            if greenlet.exception is not None:
                continue
            name, output, seconds = greenlet.value
            entry = inventory.host(name)
            parsed = parse_output(output or "")
            audit = results[name]
            audit.node, audit.seconds, audit.commands = parsed.info, seconds, COMMANDS_PER_HOST
            audit.checks = evaluate(entry, host_states(entry, live=parsed.info), parsed)
        for name, audit in results.items():
            if name in errors.errors:
                explained = explain_connect_error(inventory.host(name), errors.errors[name]) + " Nothing was audited on it."
                audit.add("ssh: reachable", False, "connected", explained)
            elif name in watches.silent():
                audit.add("ssh: answering", False, "answering", liveness.silence_paragraph(silence_s)
                          + ". Nothing was audited on it.")
            elif connection.lost(state, name):
                audit.add("ssh: connected", False, "connected", connection.lost(state, name)
                          + ". Nothing was audited on it.")
            elif not audit.checks:
                audit.add("ssh: probe", False, "probe ran", "the probe failed on the node (run with -v)")
    finally:
        watches.stop()
        state.set_stage(StateStage.Disconnect)
        disconnect_all(state)
    return AuditResult([results[e.name] for e in entries], seconds=time.monotonic() - started)
