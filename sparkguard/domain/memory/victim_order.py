"""Who the kernel and earlyoom kill first: the classes, their oom_score_adj bands, the arithmetic.

On a unified-memory node the memory that matters (CUDA allocations, host RAM
taken by the driver) is in no process's RSS, so ``oom_score`` ranks a trainer
holding 80 GiB like an idle process. The order is therefore made by
``oom_score_adj`` bands, one per class, first victim first:

====================  ===================  =========================================
class                 oom_score_adj         set by
====================  ===================  =========================================
marked training       1000                  sparkguard-train, sparkguard-oom-first,
                                            ``docker run --oom-score-adj=1000``
GPU-memory holder     600 + 200 x share     the GPU ranking agent (role earlyoom), for
  and its whole job   (600..800)            the holder, its process group, descendants
                                            and launchers; share = used_memory / MemTotal
everything else       0 (as found)          nobody
serving               -300                  sparkguard-vllm@ (role vllm); other servers
                                            (ollama, llama-server, ...) are never raised
avoid list            as found, and -300    earlyoom ``--avoid``; sshd's listener -1000
                      in earlyoom's score
====================  ===================  =========================================

The kernel (fs/proc/base.c, mm/oom_kill.c) scores, with ``R`` the process's
RSS + swap + page tables in permille of RAM + swap::

    oom_score = (1000 + R + adj) * 2 / 3              (0..2000; -1000 never chosen)

earlyoom 1.7 reads that number and adds ``+300`` for ``--prefer``, ``-300`` for
``--avoid`` (BADNESS_PREFER/AVOID in its kill.c); ties go to the larger RSS.

Serving sits BELOW everything else, so a new GPU process (adj 0 until the
agent ranks it) already outranks serving from its first instant: serving's
safety does not hang on the agent, on nvidia-smi, or on how fast a job starts.

So class X outranks class Y exactly when ``R_Y - R_X < adj_X - adj_Y`` (plus
450 where earlyoom's bonuses differ by 300 in X's favour). With the bands
above the gaps are 600 (holders over everything else), 300 (everything else
over serving) and 200 (training over the fullest holder): the order holds while
the lower class's RSS exceeds the higher one's by less than 60%, 30% and 20% of
RAM + swap. Training over everything else is a gap of 1000 and holds for every
RSS mix that fits in memory (R_else <= 1000 - R_train < 1000). No choice of
bands can make all four boundaries mix-proof: that needs a gap of 1000 at each,
and the kernel's whole range is 2000 (``docs/roles/earlyoom.md`` has the
table). On these nodes the RSS of trainer, server and notebook are a few GiB of
121, far inside the gaps; the agent adds the invisible part.
"""

from __future__ import annotations

from dataclasses import dataclass

TRAINING_ADJ = 1000
HOLDER_BASE_ADJ = 600
HOLDER_SPAN = 200
SERVING_ADJ = -300
OTHER_ADJ = 0
PREFER_BONUS = 300
AVOID_BONUS = -300
OOM_SCORE_ADJ_MIN = -1000
OOM_SCORE_ADJ_MAX = 1000

# Class names, first victim first (what tests, docs and the agent's report use).
CLASSES = ("training", "gpu-holder", "other", "serving", "avoid")


def holder_adj(used_bytes: int, memory_total_bytes: int) -> int:
    """A GPU-memory holder's band value: more memory held, killed sooner, never into training's 1000.

    >>> holder_adj(0, 100), holder_adj(50, 100), holder_adj(300, 100)
    (600, 700, 800)
    """
    if memory_total_bytes <= 0:
        return HOLDER_BASE_ADJ
    share = min(max(used_bytes, 0) / memory_total_bytes, 1.0)
    return HOLDER_BASE_ADJ + round(HOLDER_SPAN * share)


def kernel_oom_score(rss_permille: int, adj: int) -> int:
    """/proc/PID/oom_score for a process whose RSS+swap+page tables are ``rss_permille`` of RAM+swap.

    -1 for oom_score_adj -1000 (never chosen by the kernel, skipped by earlyoom).

    >>> kernel_oom_score(0, 0), kernel_oom_score(0, 1000), kernel_oom_score(1000, 1000)
    (666, 1333, 2000)
    """
    if adj <= OOM_SCORE_ADJ_MIN:
        return -1
    badness = rss_permille + adj
    return max(0, (1000 + badness) * 2 // 3)


@dataclass(frozen=True)
class Candidate:
    name: str
    rss_permille: int
    adj: int
    earlyoom_bonus: int = 0   # +300 matched --prefer, -300 matched --avoid


def earlyoom_score(candidate: Candidate) -> int:
    base = kernel_oom_score(candidate.rss_permille, candidate.adj)
    return -1 if base < 0 else base + candidate.earlyoom_bonus


def earlyoom_victim(candidates: list[Candidate]) -> Candidate:
    """earlyoom 1.7's choice: highest score, ties to the larger RSS; -1000 skipped."""
    eligible = [c for c in candidates if c.adj > OOM_SCORE_ADJ_MIN]
    return max(eligible, key=lambda c: (earlyoom_score(c), c.rss_permille))


def kernel_victim(candidates: list[Candidate]) -> Candidate:
    eligible = [c for c in candidates if c.adj > OOM_SCORE_ADJ_MIN]
    return max(eligible, key=lambda c: (kernel_oom_score(c.rss_permille, c.adj), c.rss_permille))


def gap(upper_adj: int, lower_adj: int, bonus_difference: int = 0) -> int:
    """How much more RSS (permille of RAM+swap) the lower class may have before it outranks the upper.

    >>> gap(TRAINING_ADJ, OTHER_ADJ), gap(OTHER_ADJ, SERVING_ADJ, -PREFER_BONUS)
    (1000, -150)
    """
    return upper_adj - lower_adj + bonus_difference * 3 // 2
