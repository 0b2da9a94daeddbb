"""cAdvisor's --disable_metrics: the valid names, the upstream defaults, and the corrected list.

Facts (../shared/notes/field-facts.md, Monitoring): an unknown name is a fatal flag error, and
setting the flag REPLACES the default list, so the defaults are repeated here. Containers in host
network mode report the host NIC's totals as their own (google/cadvisor#3117): ``network`` goes.
"""

from __future__ import annotations

VALID_METRICS = (
    "cpu", "sched", "percpu", "memory", "memory_numa", "cpuLoad", "diskIO", "disk", "network", "tcp",
    "advtcp", "udp", "app", "process", "hugetlb", "perf_event", "referenced_memory", "cpu_topology",
    "resctrl", "cpuset", "oom_event", "pressure",
)

UPSTREAM_DISABLED = (
    "memory_numa", "tcp", "udp", "advtcp", "sched", "process", "hugetlb", "referenced_memory",
    "cpu_topology", "resctrl", "cpuset",
)


def unknown_metrics(names: tuple[str, ...]) -> list[str]:
    return [name for name in names if name not in VALID_METRICS]


def disabled_metrics(extra: tuple[str, ...]) -> list[str]:
    """Upstream defaults first, then the extra names, each once."""
    result: list[str] = []
    for name in (*UPSTREAM_DISABLED, *extra):
        if name not in result:
            result.append(name)
    return result
