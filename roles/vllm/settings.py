"""Defaults of role ``vllm``: every variable, in one place.

On a unified-memory node ``--gpu-memory-utilization`` is a fraction of the WHOLE
node (0.85 of a DGX Spark is ~102 GiB). sparkguard therefore never lets the
fraction size the KV cache: it writes an explicit ``kv-cache-memory-bytes``
from the node budget, and a utilization just large enough for vLLM's startup
check (weights + KV + runtime, rounded up to 0.01).
"""

from __future__ import annotations

from typing import Any, Literal

from sparkguard.domain.memory.victim_order import HOLDER_BASE_ADJ, SERVING_ADJ
from sparkguard.settings import HostName, ImageRef, ModelRef, NodePath, Settings, Word, required, setting

from .options import VLLM_VERSION


class ServedModel(Settings):
    """One model served by one vLLM instance (`sparkguard-vllm@<name>.service`)."""

    model: ModelRef = required(
        "Hugging Face repo id or path on the node that vLLM loads (the `model` key of its config).", min_length=1)
    shape: str | None = setting(
        None,
        "Architecture for sizing weights and KV: an estimator preset (gemma-4-26B-A4B, gemma-3-27B,"
        " Qwen3-30B-A3B, Llama-3.1-8B) or a config.json path on the operator's machine. Without it,"
        " declare weights_gib and kv_cache_gib.")
    weights_dtype: Literal["bf16", "fp16", "fp8"] = setting(
        "bf16",
        "Serving precision of the weights. fp8 = vLLM's online fp8 quantization (`quantization: fp8`):"
        " linear layers take 1 byte per parameter instead of 2.")
    weights_gib: float | None = setting(
        None, "Weights as loaded (override; e.g. a pre-quantized NVFP4/AWQ checkpoint). Default: from shape.",
        unit="GiB", gt=0, le=65536)
    kv_cache_dtype: Literal["auto", "fp8"] = setting(
        "auto", "KV cache precision (`kv-cache-dtype`); fp8 halves the bytes per token.")
    max_model_len: int = setting(8192, "Longest request (prompt + output), `max-model-len`.", unit="tokens",
                                 ge=16, le=1 << 22)
    max_num_seqs: int = setting(8, "Concurrent sequences, `max-num-seqs`.", ge=1, le=4096)
    kv_cache_gib: float | None = setting(
        None,
        "KV cache size (`kv-cache-memory-bytes`). Default: max_num_seqs full-length sequences, from shape"
        " (sliding-window layers capped at their window).",
        unit="GiB", gt=0, le=65536)
    shared_kv_cache_gib: float | None = setting(
        None,
        "KV cache while a training job runs (during_training: shrink). Default: one max_model_len sequence"
        " plus 25% (vLLM refuses to start below one sequence, and rounds to whole blocks), at most the full KV.",
        unit="GiB", gt=0, le=65536)
    gpu_memory_utilization: float | None = setting(
        None,
        "Legacy sizing: vLLM claims this fraction of the device's CUDA total and fills the rest with KV"
        " cache (what the incident ran with, 0.85). Leave unset: sparkguard computes it from weights + KV"
        " + runtime. Set together with kv_cache_gib it only feeds vLLM's startup check and must cover them.",
        gt=0, le=1)
    runtime_overhead_gib: float = setting(
        4.0,
        "Everything the instance takes besides weights and KV: CUDA context (~0.5-1), the profiled activation"
        " peak and sampler (~1), CUDA graphs (~0.5-1; none with enforce-eager), and the CPU-side RSS of the"
        " API server and EngineCore processes (~1.5). Measure: MemAvailable before start - after the server"
        " reports ready - weights - KV.",
        unit="GiB", ge=0, le=1024)
    port: int = setting(8000, "HTTP port (`port`); /health and /metrics live there.", ge=1, le=65535)
    options: dict[str, Any] = setting(
        lambda: {},
        f"Further `vllm serve` options (long names without --, e.g. enable-prefix-caching: true), checked"
        f" against the option list of vLLM {VLLM_VERSION}. Options sparkguard sizes from the budget are refused.")


class VllmSettings(Settings):
    """vLLM servers sized from the node budget, one systemd instance per model."""

    enabled: bool = setting(True, "Install the vLLM units and configs for the models below; an instance no longer"
                                 " listed is stopped and its files removed (no models: only that sweep).")
    runtime: Literal["docker", "native"] = setting(
        "docker",
        "docker = run `image` with docker (NVIDIA container runtime); native = run `native_binary` directly"
        " (a venv's vllm).")
    image: ImageRef | None = setting(
        None,
        "Pinned container image (runtime docker). Default by device profile: vllm/vllm-openai:v<pinned vLLM>"
        " on amd64 profiles; required on dgx-spark, gh200 and jetson (aarch64: the Docker Hub image of the"
        " pinned release is amd64-only), e.g. NVIDIA's nvcr.io/nvidia/vllm:25.11-py3 built for GB10. Pin a"
        " tag or digest, never `latest` (roles/vllm/images.py).", min_length=1)
    native_binary: NodePath = setting(
        "/opt/vllm/bin/vllm", "Absolute path of the `vllm` executable (runtime native).", min_length=1)
    listen: HostName = setting(
        "127.0.0.1", "Address the servers bind (`host`). Loopback by default: put a proxy with auth in front.",
        min_length=1)
    during_training: Literal["shrink", "stop", "keep"] = setting(
        "shrink",
        "While sparkguard-training.target is active: shrink = restart each model with its shared KV size,"
        " stop = stop serving, keep = leave it (the budget must then fit both at full size).")
    oom_score_adj: int = setting(
        SERVING_ADJ,
        "oom_score_adj of the servers (the serving band): BELOW everything unmarked (0), above -1000, so every"
        " GPU process that is not serving (adj 0 until earlyoom's GPU ranking agent raises it into 600-800,"
        " marked training 1000) and every notebook or shell dies before serving, even before the agent has"
        " looked (a fast start) or where nvidia-smi is missing. -1000 would make serving unkillable and is"
        " refused. The gaps are the RSS difference each boundary tolerates (docs/roles/earlyoom.md, class order).",
        ge=-999, lt=HOLDER_BASE_ADJ)
    cuda_total_gib: float | None = setting(
        None,
        "What CUDA reports as total device memory (the base of gpu-memory-utilization). Default: from the"
        " device profile table in sparkguard/domain/memory/planner.py (dgx-spark 119.6). Measure: `python3 -c 'import torch;"
        " print(torch.cuda.mem_get_info()[1] / 2**30)'`.",
        unit="GiB", gt=0, le=65536)
    hf_token_env: str | None = setting(
        None, "Environment variable ON THE OPERATOR'S MACHINE holding the Hugging Face token (e.g. HF_TOKEN).",
        min_length=1)
    hf_token_file: str | None = setting(
        None, "File ON THE OPERATOR'S MACHINE holding the Hugging Face token (absolute or ~ path).", min_length=1,
        operator_file="secret")
    api_key_env: Word | None = setting(
        None, "Environment variable ON THE OPERATOR'S MACHINE holding the API key clients must send (vLLM's"
        " VLLM_API_KEY, written only to the instance's 0600 env file). Never put the key in options.")
    api_key_file: str | None = setting(
        None, "File ON THE OPERATOR'S MACHINE holding that API key (absolute or ~ path).", min_length=1,
        operator_file="secret")
    hf_cache_dir: NodePath = setting(
        "/var/lib/sparkguard/hf-cache", "Model cache on the node (mounted into the container).", min_length=1)
    models: dict[str, ServedModel] = setting(
        lambda: {}, "Served models by instance name (lowercase letters, digits, dashes): see docs/planner.md.")
