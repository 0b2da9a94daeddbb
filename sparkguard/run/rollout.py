"""Rolling applies: ``--serial N`` batches, ``--max-fail-percent``, and what is reported for hosts never reached.

A fleet is changed a few nodes at a time so that a bad change stops after the first batch instead of
hanging every node at once. Each batch is one ordinary run (connect all of it, lock, apply, report);
the rollout stops when a batch's failures exceed the allowed share (0 % by default: any failure), and
every host it did not reach is reported FAILED ("not applied"), so the retry file names it too.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..errors import ConnectError
from .runner import ApplyResult, HostResult

Log = Callable[[str], None]


def batches(names: list[str], serial: int | None) -> list[list[str]]:
    """``names`` in batches of ``serial`` (one batch when None).

    >>> batches(["a", "b", "c"], 2)
    [['a', 'b'], ['c']]
    >>> batches(["a", "b"], None)
    [['a', 'b']]
    """
    if not serial:
        return [list(names)]
    return [names[i:i + serial] for i in range(0, len(names), serial)]


def batch_failed(results: list[HostResult], max_fail_percent: int) -> bool:
    """Ansible's max_fail_percentage, per batch: stop when MORE than that share failed.

    >>> batch_failed([HostResult("a", errors=["x"]), HostResult("b")], 50)
    False
    >>> batch_failed([HostResult("a", errors=["x"]), HostResult("b")], 0)
    True
    """
    failed = sum(1 for r in results if not r.ok)
    return failed > math.floor(len(results) * max_fail_percent / 100)


def roll(names: list[str], run_batch: Callable[[list[str]], ApplyResult], *, serial: int | None,
         max_fail_percent: int, dry: bool, log: Log = lambda _: None) -> ApplyResult:
    """Run ``run_batch`` over ``names`` batch by batch; stop after a batch that failed too much."""
    planned = batches(names, serial)
    results: list[HostResult] = []
    stopped_after: int | None = None
    for number, batch in enumerate(planned, start=1):
        if len(planned) > 1:
            log(f"batch {number}/{len(planned)}: {', '.join(batch)}")
        try:
            batch_results = run_batch(batch).hosts
        except ConnectError as error:
            unreachable = set(error.hosts)
            batch_results = [HostResult(name, errors=[
                str(error) if name in unreachable else
                f"not applied: another host of its batch was unreachable ({', '.join(sorted(unreachable))})"])
                for name in batch]
        results += batch_results
        if batch_failed(batch_results, max_fail_percent) and number < len(planned):
            stopped_after = number
            break
    if stopped_after is not None:
        done = {r.host for r in results}
        why = (f"not applied: batch {stopped_after} of {len(planned)} failed beyond --max-fail-percent "
               f"{max_fail_percent}, so the rollout stopped before this host")
        results += [HostResult(name, errors=[why]) for name in names if name not in done]
        log(f"stopped after batch {stopped_after}: {why.split(': ', 1)[1]}")
    return ApplyResult(dry=dry, hosts=results)
