"""Defaults of role ``budget``: every variable, in one place.

The budget is the arithmetic the incident skipped: vLLM held ~93% of a 121.7 GiB
node and a LoRA job that needed >110 GB was started next to it. These settings
declare what else lives on the node (the OS reserve) and the planned training
job, so ``sparkguard plan`` (and validate/render/apply) can refuse an
over-committed host before anything starts.
"""

from __future__ import annotations

from typing import Literal

from sparkguard.settings import Settings, Text, setting


class TrainingJob(Settings):
    """The training job planned on this host: a measured peak, or a job spec sparkguard estimates."""

    name: Text = setting("training", "Label for the job in plan output and messages.", min_length=1)
    peak_gib: float | None = setting(
        None,
        "Measured peak of the job as the NODE saw it (drop of MemAvailable from before start to the lowest"
        " point, e.g. from node_memory_MemAvailable_bytes). Takes precedence over the job spec below."
        " Leave unset to have sparkguard estimate it from `model` and the spec.",
        unit="GiB", gt=0, le=65536)
    model: str | None = setting(
        None,
        "Model to estimate the peak for: an estimator preset (gemma-4-26B-A4B, gemma-3-27B, Qwen3-30B-A3B,"
        " Llama-3.1-8B) or the path of a Hugging Face config.json on the operator's machine."
        " Neither this nor peak_gib = no training planned on this host.")
    method: Literal["full", "lora", "qlora"] = setting("lora", "Fine-tuning method (see docs/estimator.md).")
    rank: int = setting(16, "LoRA rank.", ge=1, le=4096)
    target: Literal["attention", "all-linear"] = setting("attention", "LoRA target modules.")
    seq_len: int = setting(2048, "Tokens per sample (max_seq_length).", unit="tokens", ge=1, le=1 << 22)
    micro_batch: int = setting(1, "Samples per forward pass.", ge=1, le=4096)
    dtype: Literal["bf16", "fp16", "fp32"] = setting("bf16", "Training dtype.")
    gradient_checkpointing: bool = setting(True, "Gradient (activation) checkpointing on.")
    attn: Literal["flash", "sdpa", "eager"] = setting("sdpa", "Attention implementation.")
    loss: Literal["standard", "chunked"] = setting(
        "standard", "chunked = a fused linear cross-entropy (Liger, Unsloth, Cut Cross-Entropy).")
    cpu_overhead_gib: float = setting(
        3.0,
        "Host memory of the trainer outside its CUDA peak, added to ESTIMATED peaks only: the Python process,"
        " the tokenized dataset, DataLoader workers. Measure: RSS of the trainer and its workers"
        " (`ps -o rss= -p PID`) a few steps into a run.",
        unit="GiB", ge=0, le=1024)

    @property
    def planned(self) -> bool:
        return self.peak_gib is not None or self.model is not None


class BudgetSettings(Settings):
    """The node's memory budget: earlyoom's SIGTERM line + OS reserve + serving + training must fit MemTotal."""

    enabled: bool = setting(
        True,
        "Check the budget (validate/render/apply fail on an over-committed host) and write"
        " /etc/sparkguard/budget.json, on hosts that serve models or plan a training job.")
    os_reserve_gib: float = setting(
        6.0,
        "Memory that neither vLLM nor the trainer accounts for: kernel, slab, system services, desktop,"
        " docker, monitoring, and the page cache they need. Measure on the node with serving and training"
        " stopped: `sync; echo 3 > /proc/sys/vm/drop_caches`, then MemTotal - MemAvailable from /proc/meminfo,"
        " plus a margin for what starts later (docs/planner.md).",
        unit="GiB", ge=0, le=65536)
    training: TrainingJob = setting(lambda: TrainingJob(), "The training job planned on this host.")
