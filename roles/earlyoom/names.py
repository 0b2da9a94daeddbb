"""Process names earlyoom prefers and avoids, as the kernel reports them.

earlyoom matches ``--prefer``/``--avoid`` against /proc/PID/comm (at most 15
characters), not the command line. A current PyTorch trainer (2.5 and later,
pytorch#134066) keeps its interpreter's comm (``python3``, ``python3.12``): only
torch 2.3-2.4 renamed the main thread to ``pt_main_thread``. Still set by torch:
``pt_elastic`` (torchrun's agent) and ``pt_data_worker`` (DataLoader workers).
Names therefore mark launchers and workers; the trainer itself is found by the
GPU memory it holds (the ranking agent) or by its mark (oom_score_adj 1000).
Debian's node_exporter binary
``prometheus-node-exporter`` shows as ``prometheus-node``; journald as
``systemd-journal``. vLLM's engine is ``VLLM::EngineCore`` and its API server
``vllm``: neither may ever be preferred.

No backslashes or quotes: the regex travels through /etc/default/earlyoom
(systemd EnvironmentFile, where ``\\.`` loses its backslash) and systemd's
ExecStart unquoting. Use ``[.]`` for a literal dot.
"""

from __future__ import annotations

import re

# Launchers: the process that starts (and on SIGTERM tears down) a whole training job. Killing one
# ends the job; killing a worker ends nothing (its rank keeps the memory), so workers are not here:
# `pt_data_worker` (DataLoader workers) holds no memory of its own and is ranked with its job by the GPU
# ranking agent, and `torchrun` is never a comm (torchrun names itself `pt_elastic`).
TRAINING_NAMES = (
    "pt_elastic",       # torchrun / elastic agent (torch/distributed/run.py; still set by current torch)
    "pt_main_thread",   # torch 2.3-2.4 only (pytorch#121170; removed in 2.5 by #134066)
    "accelerate",       # `accelerate launch`
    "deepspeed",
    "tune",             # torchtune's `tune run`
    "axolotl",          # `axolotl train`
    "llamafactory-cl",  # LLaMA-Factory's `llamafactory-cli`, truncated to 15 characters
)
# Serving: never preferred, never ranked into the holder band by the GPU ranking agent. comm as the
# kernel reports it (15 characters).
SERVING_NAMES = (
    "vllm",             # `vllm serve`: the API server
    "VLLM::.+",         # engine and workers: `VLLM::EngineCore` (comm `VLLM::EngineCor`), `VLLM::Worker_TP0`
    "ollama",           # ollama's server and its runners (`ollama runner` is the same binary)
    "llama-server",     # llama.cpp's HTTP server
    "sglang::.+",       # SGLang's processes (`sglang::scheduler`, `sglang::detokenizer`, setproctitle)
    "trtllm-serve",     # TensorRT-LLM's OpenAI server
    "tritonserver",     # Triton Inference Server
    "text-generation",  # TGI's `text-generation-launcher` / `-router`, truncated to 15 characters
)
# Units of servers, as system units (glob): the agent reads them from /system.slice only.
# Role vllm's own units (sparkguard-vllm@*.service) are added by the role from its layout.
SERVING_UNITS = (
    "ollama.service",              # ollama's installer
    "llama-server*.service",
    "tritonserver*.service",
)

# Plain interpreters: non-PyTorch trainers, but also any python3-named server.
PYTHON_NAMES = (
    "python",
    "python3",
    "python3[.][0-9]+",  # python3.11, python3.12 ...
)

# What must survive so the node stays reachable and the evidence is kept.
PROTECTED_NAMES = (
    "sshd",
    "sshd-session",     # OpenSSH 9.8+ per-connection process
    "systemd",
    "systemd-journal",  # systemd-journald, truncated to 15 characters
    "systemd-logind",
    "dbus-daemon",
    "dbus-broker",
    "earlyoom",
    "nohang",           # the guard where earlyoom is 1.8+ (roles/earlyoom/guard.py)
    "gpu-ranking",      # sparkguard's GPU ranking agent
    "prometheus",
    "prometheus-node",  # Debian's prometheus-node-exporter, truncated
    "node_exporter",    # upstream binary name
    "containerd",
    "dockerd",
)

# What a name fragment may contain: regex syntax and comm characters, nothing a shell, systemd's
# EnvironmentFile or nohang's config parser would treat specially (no $, `, ;, &, <, >, quotes,
# backslashes, whitespace, '///').
ALLOWED = re.compile(r"[A-Za-z0-9_.:@+\-\[\]()|^*?{},]+")


def alternation(names: tuple[str, ...]) -> str:
    """Anchored ERE matching exactly one of the names.

    >>> alternation(("sshd", "python3[.][0-9]+"))
    '^(sshd|python3[.][0-9]+)$'
    """
    return "^(" + "|".join(names) + ")$"


def prefer_regex(extra: tuple[str, ...] = (), plain_python: bool = False) -> str:
    return alternation(TRAINING_NAMES + (PYTHON_NAMES if plain_python else ()) + tuple(extra))


def avoid_regex(extra: tuple[str, ...] = ()) -> str:
    return alternation(PROTECTED_NAMES + tuple(extra))


def fragment_problem(fragment: str) -> str | None:
    """Why a user-supplied name fragment cannot be used, or None."""
    if not fragment:
        return "an empty name would match every process"
    if not ALLOWED.fullmatch(fragment) or "//" in fragment:
        return ("may contain only letters, digits and _ . : @ + - [ ] ( ) | ^ * ? { } , (no $, quotes,"
                " backslashes, spaces or shell characters: it reaches earlyoom's EnvironmentFile and nohang's"
                " config); write a literal dot as [.]")
    try:
        re.compile(fragment)
    except re.error as error:
        return f"is not a valid regular expression: {error}"
    if re.fullmatch(fragment, ""):
        return "matches the empty string, so it would match too much"
    return None


def serving_regex(extra: tuple[str, ...] = ()) -> str:
    return alternation(SERVING_NAMES + tuple(extra))


def launcher_regex(extra: tuple[str, ...] = ()) -> str:
    """Launchers above a GPU holder, which the agent ranks with the holder's job."""
    return alternation(TRAINING_NAMES + tuple(extra))


# A unit name glob: systemd's unit name characters, plus * and ? (no path, no shell, no quote, no backslash).
UNIT_GLOB = re.compile(r"[A-Za-z0-9_.:@*?-]+[.](service|scope)")


def unit_glob_problem(glob: str) -> str | None:
    """Why a serving unit glob cannot be used, or None.

    >>> unit_glob_problem("ollama.service"), unit_glob_problem("my-llm@*.service")
    (None, None)
    >>> unit_glob_problem("*.service")
    "would match every system service; name the server's unit (e.g. ollama.service, my-llm@*.service)"
    """
    if not UNIT_GLOB.fullmatch(glob):
        return "must be a system unit name or glob ending in .service or .scope (letters, digits and _ . : @ - * ?)"
    if not glob.rsplit(".", 1)[0].strip("*?"):
        return "would match every system service; name the server's unit (e.g. ollama.service, my-llm@*.service)"
    return None
