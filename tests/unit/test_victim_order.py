"""The class order (training > GPU holder > other > serving > avoid) as arithmetic, table-driven.

Each row is a node's processes as the kernel scores them: RSS in permille of
RAM + swap (what /proc/PID/oom_score uses), oom_score_adj as sparkguard and its
agent set them, earlyoom's +-300 for --prefer/--avoid. The numbers are a DGX
Spark's (121 GiB MemTotal, 16 GiB swap: 1 permille = 0.137 GiB): a trainer whose
80 GiB of CUDA memory is in no RSS, vLLM whose KV cache is not either, a
notebook, sshd. The expected victim must hold for earlyoom 1.7 and for the
kernel's own OOM killer.
"""

from __future__ import annotations

import pytest

from sparkguard.domain.memory import victim_order as vo
from sparkguard.domain.memory.victim_order import Candidate

GIB_PERMILLE = 1000 / (121 + 16)   # one GiB of RSS in permille of RAM + swap


def permille(gib: float) -> int:
    return round(gib * GIB_PERMILLE)


def holder(name: str, rss_gib: float, gpu_gib: float, bonus: int = 0) -> Candidate:
    return Candidate(name, permille(rss_gib), vo.holder_adj(int(gpu_gib * 2**30), 121 * 2**30), bonus)


VLLM = Candidate("VLLM::EngineCor", permille(6), vo.SERVING_ADJ)          # larger RSS than any trainer
VLLM_API = Candidate("vllm", permille(2.5), vo.SERVING_ADJ)
NOTEBOOK = Candidate("python3 notebook", permille(4), vo.OTHER_ADJ)
SSH_SESSION = Candidate("sshd-session", permille(0.01), vo.OTHER_ADJ, vo.AVOID_BONUS)
SSHD = Candidate("sshd", permille(0.01), vo.OOM_SCORE_ADJ_MIN)
JOURNALD = Candidate("systemd-journal", permille(0.2), vo.OTHER_ADJ, vo.AVOID_BONUS)
BYSTANDERS = [VLLM, VLLM_API, NOTEBOOK, SSH_SESSION, SSHD, JOURNALD]

LAUNCHES = {
    # sparkguard-train / sparkguard-oom-first / docker --oom-score-adj=1000: marked.
    "sparkguard-train": Candidate("python3", permille(3), vo.TRAINING_ADJ),
    "sparkguard-oom-first": Candidate("python3", permille(3), vo.TRAINING_ADJ),
    "torchrun (marked)": Candidate("pt_elastic", permille(1), vo.TRAINING_ADJ, vo.PREFER_BONUS),
    # Unmarked, found by the agent through the 80 GiB nvidia-smi reports.
    "plain python3": holder("python3", 3, 80),
    "docker run (container pid)": holder("python", 3, 80),
    "JAX job": holder("jaxtrain", 1.5, 60),
    "JAX job holding little": holder("python3.12", 2, 4),
    # Not yet looked at by the agent (a fast start, no nvidia-smi, the agent down): adj 0, still above serving.
    "plain python3, not yet ranked": Candidate("python3", permille(3), vo.OTHER_ADJ),
}
# The notebook outranks a trainer the agent has not ranked only by RSS: what the agent is for.
NEEDS_THE_AGENT = {"plain python3, not yet ranked"}


@pytest.mark.parametrize("launch", LAUNCHES)
def test_trainer_is_first_victim_for_earlyoom_and_kernel(launch):
    trainer = LAUNCHES[launch]
    node = [trainer, *BYSTANDERS] if launch not in NEEDS_THE_AGENT else [trainer, VLLM, VLLM_API, SSH_SESSION, SSHD]
    assert vo.earlyoom_victim(node) is trainer
    assert vo.kernel_victim(node) is trainer


@pytest.mark.parametrize("upper,lower", [
    (LAUNCHES["sparkguard-train"], LAUNCHES["plain python3"]),
    (LAUNCHES["plain python3"], NOTEBOOK),
    (LAUNCHES["JAX job holding little"], NOTEBOOK),
    (NOTEBOOK, VLLM),
    (LAUNCHES["plain python3, not yet ranked"], VLLM),
    (JOURNALD, SSHD),
])
def test_each_class_outranks_the_next(upper, lower):
    assert vo.earlyoom_victim([lower, upper]) is upper
    assert vo.kernel_victim([lower, upper]) is upper


def test_serving_outranks_the_avoid_list_for_the_guard_but_not_for_the_kernel():
    """earlyoom's and nohang's -300 for the avoid list puts an SSH session below serving; the kernel's own
    OOM killer sees no name bonus and takes the session's shell (adj 0) first: the listener stays -1000,
    so a new login still works, and the kernel acts only after the guard did not."""
    assert vo.earlyoom_victim([SSH_SESSION, VLLM]) is VLLM
    assert vo.kernel_victim([SSH_SESSION, VLLM]) is SSH_SESSION


def test_sshd_listener_is_never_a_candidate():
    assert vo.kernel_oom_score(1000, vo.OOM_SCORE_ADJ_MIN) == -1
    assert vo.earlyoom_victim([SSHD, SSH_SESSION]) is SSH_SESSION


def test_bands_are_ordered_and_inside_the_kernel_range():
    holder_max = vo.HOLDER_BASE_ADJ + vo.HOLDER_SPAN
    assert vo.OOM_SCORE_ADJ_MAX == vo.TRAINING_ADJ > holder_max >= vo.HOLDER_BASE_ADJ > vo.OTHER_ADJ > vo.SERVING_ADJ
    assert vo.SERVING_ADJ > vo.OOM_SCORE_ADJ_MIN          # serving stays killable


@pytest.mark.parametrize("upper_adj,lower_adj,expected_gap", [
    (vo.TRAINING_ADJ, vo.OTHER_ADJ, 1000),                           # mix-proof
    (vo.TRAINING_ADJ, vo.HOLDER_BASE_ADJ + vo.HOLDER_SPAN, 200),
    (vo.HOLDER_BASE_ADJ, vo.OTHER_ADJ, 600),
    (vo.OTHER_ADJ, vo.SERVING_ADJ, 300),
    (vo.HOLDER_BASE_ADJ, vo.SERVING_ADJ, 900),
])
def test_documented_gaps(upper_adj, lower_adj, expected_gap):
    assert vo.gap(upper_adj, lower_adj) == expected_gap


def test_training_outranks_everything_else_for_every_rss_mix_that_fits():
    """R_train + R_other <= 1000: the 1000-wide gap can never be crossed (ties go to the larger RSS)."""
    for train in range(0, 1001, 25):
        for other in range(0, 1001 - train, 25):
            trainer = Candidate("trainer", train, vo.TRAINING_ADJ)
            rest = Candidate("other", other, vo.OTHER_ADJ)
            assert vo.kernel_victim([rest, trainer]) is trainer or other > train
            assert vo.earlyoom_victim([rest, trainer]) is trainer or other > train
            if other > train:   # a tie at 2000 only when the trainer's band is already full
                assert vo.kernel_oom_score(train, vo.TRAINING_ADJ) >= vo.kernel_oom_score(other, vo.OTHER_ADJ)


@pytest.mark.parametrize("upper,lower_adj", [
    (LAUNCHES["plain python3"], vo.OTHER_ADJ),
    (Candidate("notebook", permille(6), vo.OTHER_ADJ), vo.SERVING_ADJ),
])
def test_gap_is_the_exact_boundary(upper, lower_adj):
    """The order holds until the lower class's RSS exceeds the upper's by the gap, then flips: as documented."""
    boundary = upper.rss_permille + vo.gap(upper.adj, lower_adj)
    inside = Candidate("lower", boundary - 2, lower_adj)
    beyond = Candidate("lower", boundary + 2, lower_adj)
    assert vo.kernel_victim([inside, upper]) is upper
    assert vo.kernel_victim([beyond, upper]) is beyond


def test_holder_band_grows_with_the_share_and_stays_below_training():
    total = 121 * 2**30
    values = [vo.holder_adj(gib * 2**30, total) for gib in (0, 10, 60, 121, 500)]
    assert values == sorted(values)
    assert values[0] == vo.HOLDER_BASE_ADJ and values[-1] == vo.HOLDER_BASE_ADJ + vo.HOLDER_SPAN
    assert max(values) < vo.TRAINING_ADJ
    assert vo.holder_adj(10, 0) == vo.HOLDER_BASE_ADJ


def test_the_incident_mix_without_the_agent_spares_serving_and_may_hit_the_notebook():
    """Serving's safety does not hang on the agent; the notebook's does (an unranked trainer ties it on adj)."""
    unranked_trainer = Candidate("python3", permille(3), vo.OTHER_ADJ)
    assert vo.earlyoom_victim([unranked_trainer, *BYSTANDERS]) is NOTEBOOK     # larger RSS than the trainer
    assert vo.kernel_victim([unranked_trainer, *BYSTANDERS]) is NOTEBOOK
    assert vo.earlyoom_victim([unranked_trainer, VLLM, VLLM_API, SSH_SESSION, SSHD, JOURNALD]) is unranked_trainer


@pytest.mark.parametrize("serving_rss_gib", [0.5, 6, 20, 40])
def test_a_not_yet_ranked_gpu_process_outranks_serving_whatever_servings_rss(serving_rss_gib):
    """The fast-start window: a new GPU process at adj 0 before any agent pass still goes before serving,
    unless serving's RSS is 300 permille (41 GiB on a Spark) larger."""
    serving = Candidate("VLLM::EngineCor", permille(serving_rss_gib), vo.SERVING_ADJ)
    new_trainer = Candidate("python3", permille(0.5), vo.OTHER_ADJ)
    assert vo.earlyoom_victim([serving, new_trainer]) is new_trainer
    assert vo.kernel_victim([serving, new_trainer]) is new_trainer


def test_docstring_examples_hold():
    import doctest

    result = doctest.testmod(vo)
    assert result.attempted > 0 and result.failed == 0
