"""Who watches each node: a hung node's own Prometheus hangs with it, so only another one can page.

The incident's node was watched by nothing but itself, and the dashboards stayed green. This is
advice, not an error: a single lab node may rightly stand alone.
"""

from __future__ import annotations

from collections.abc import Iterable

from sparkguard.hostconfig import HostConfig

from .resolve import resolve


def unwatched(configs: dict[str, HostConfig]) -> Iterable[str]:
    """One paragraph per monitored node that no other Prometheus in the inventory scrapes."""
    monitored = {name: cfg for name, cfg in configs.items() if cfg.monitoring.enabled}
    scrapers = {name: set(resolve(cfg).node_targets) for name, cfg in monitored.items()
                if cfg.monitoring.prometheus.enabled}
    for name, cfg in monitored.items():
        if cfg.monitoring.watched_externally:
            continue
        address = resolve(cfg).node_exporter
        if any(address in targets for other, targets in scrapers.items() if other != name):
            continue
        yield (f"host '{name}': no other Prometheus in this inventory scrapes its node_exporter ({address}), so a "
               f"hang of this node cannot page anyone (its own Prometheus hangs with it). List {address} in a "
               f"peer's monitoring.prometheus.node_targets (inventory/example does), or set "
               f"monitoring.watched_externally: true if a central Prometheus outside this inventory scrapes it.")
