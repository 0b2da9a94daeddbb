"""Rolling applies as a table: batches, the failure share that stops them, what unreached hosts say."""

from __future__ import annotations

import pytest

from sparkguard.errors import ConnectError
from sparkguard.run.rollout import roll
from sparkguard.run.runner import ApplyResult, HostResult

HOSTS = ["a", "b", "c", "d", "e"]


def fake(failing: set[str], unreachable: set[str] = frozenset()):
    calls: list[list[str]] = []

    def run_batch(names: list[str]) -> ApplyResult:
        calls.append(names)
        if unreachable & set(names):
            raise ConnectError("host unreachable", hosts=tuple(sorted(unreachable & set(names))))
        return ApplyResult(dry=False, hosts=[HostResult(n, errors=["boom"] if n in failing else []) for n in names])
    return run_batch, calls


@pytest.mark.parametrize(("serial", "pct", "failing", "batches_run", "failed"), [
    (2, 0, set(), [["a", "b"], ["c", "d"], ["e"]], []),                       # all good: every batch
    (2, 0, {"b"}, [["a", "b"]], ["b", "c", "d", "e"]),                        # any failure stops
    (2, 50, {"b"}, [["a", "b"], ["c", "d"], ["e"]], ["b"]),                   # 1 of 2 is not more than 50 %
    (2, 49, {"b"}, [["a", "b"]], ["b", "c", "d", "e"]),
    (1, 0, {"e"}, [["a"], ["b"], ["c"], ["d"], ["e"]], ["e"]),                # the last batch: nothing left to stop
    (5, 0, {"a"}, [HOSTS], ["a"]),                                            # one batch
])
def test_batches_and_stops(serial, pct, failing, batches_run, failed):
    run_batch, calls = fake(failing)
    result = roll(HOSTS, run_batch, serial=serial, max_fail_percent=pct, dry=False)
    assert calls == batches_run
    assert [h.host for h in result.hosts] == HOSTS                           # every host reported, in order
    assert [h.host for h in result.hosts if not h.ok] == failed
    for host in result.hosts:
        if host.host in failed and host.host not in failing:
            assert "the rollout stopped before this host" in host.errors[0]


def test_an_unreachable_host_fails_its_batch_without_touching_the_rest_of_it():
    run_batch, calls = fake(set(), unreachable={"c"})
    result = roll(HOSTS, run_batch, serial=2, max_fail_percent=0, dry=False)
    assert calls == [["a", "b"], ["c", "d"]]
    errors = {h.host: h.errors[0] for h in result.hosts if not h.ok}
    assert errors["c"] == "host unreachable" and "another host of its batch was unreachable (c)" in errors["d"]
    assert "batch 2 of 3" in errors["e"]
