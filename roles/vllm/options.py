"""`vllm serve` option names, pinned to one vLLM release, so a typo fails validation.

``vllm serve --config FILE.yaml`` turns each key into ``--key``; an unknown key
is only noticed when the server starts on the node (and then crash-loops). The
names below are the long options of ``vllm serve --help=all`` in vLLM 0.11.0
(frontend, model, load, cache, parallel, scheduler, LoRA, multimodal,
speculative, structured outputs, observability, compilation groups): the ones a
single-node operator sets. A real option missing here is refused too; add it
after checking ``vllm serve --help=all`` of the pinned version, and bump
``VLLM_VERSION`` (and the image tag) together.
"""

from __future__ import annotations

VLLM_VERSION = "0.11.0"

# Written by sparkguard from the budget or from other settings: never through `options`.
MANAGED = frozenset({
    "model", "served-model-name", "host", "port", "gpu-memory-utilization", "kv-cache-memory-bytes",
    "max-model-len", "max-num-seqs", "dtype", "quantization", "kv-cache-dtype", "config",
})

FRONTEND = frozenset({
    "host", "port", "uds", "uvicorn-log-level", "disable-uvicorn-access-log", "allow-credentials",
    "allowed-origins", "allowed-methods", "allowed-headers", "api-key", "lora-modules", "chat-template",
    "chat-template-content-format", "trust-request-chat-template", "response-role", "ssl-keyfile",
    "ssl-certfile", "ssl-ca-certs", "enable-ssl-refresh", "ssl-cert-reqs", "root-path", "middleware",
    "return-tokens-as-token-ids", "disable-frontend-multiprocessing", "enable-request-id-headers",
    "enable-auto-tool-choice", "exclude-tools-when-tool-choice-none", "tool-call-parser", "tool-parser-plugin",
    "tool-server", "log-config-file", "max-log-len", "disable-fastapi-docs", "enable-prompt-tokens-details",
    "enable-server-load-tracking", "enable-force-include-usage", "enable-tokenizer-info-endpoint",
    "enable-log-outputs", "h11-max-incomplete-event-size", "h11-max-header-count", "log-error-stack",
    "api-server-count", "config", "disable-log-stats", "enable-log-requests", "disable-log-requests",
})

MODEL = frozenset({
    "model", "runner", "convert", "task", "tokenizer", "tokenizer-mode", "trust-remote-code", "dtype", "seed",
    "hf-config-path", "allowed-local-media-path", "allowed-media-domains", "revision", "code-revision",
    "rope-scaling", "rope-theta", "tokenizer-revision", "max-model-len", "quantization", "enforce-eager",
    "max-logprobs", "logprobs-mode", "disable-sliding-window", "disable-cascade-attn", "skip-tokenizer-init",
    "enable-prompt-embeds", "served-model-name", "config-format", "hf-token", "hf-overrides",
    "pooler-config", "logits-processor-pattern", "generation-config", "override-generation-config",
    "enable-sleep-mode", "model-impl", "override-attention-dtype", "logits-processors", "io-processor-plugin",
    "max-seq-len-to-capture",
})

LOAD = frozenset({
    "load-format", "download-dir", "safetensors-load-strategy", "model-loader-extra-config",
    "ignore-patterns", "use-tqdm-on-load", "pt-load-map-location",
})

CACHE = frozenset({
    "block-size", "gpu-memory-utilization", "kv-cache-memory-bytes", "swap-space", "kv-cache-dtype",
    "num-gpu-blocks-override", "enable-prefix-caching", "prefix-caching-hash-algo", "cpu-offload-gb",
    "calculate-kv-scales", "kv-sharing-fast-prefill", "mamba-cache-dtype", "mamba-ssm-cache-dtype",
})

PARALLEL = frozenset({
    "distributed-executor-backend", "pipeline-parallel-size", "tensor-parallel-size",
    "decode-context-parallel-size", "data-parallel-size", "data-parallel-rank", "data-parallel-size-local",
    "data-parallel-address", "data-parallel-rpc-port", "data-parallel-backend", "data-parallel-hybrid-lb",
    "enable-expert-parallel", "enable-eplb", "eplb-config", "max-parallel-loading-workers",
    "ray-workers-use-nsight", "disable-custom-all-reduce", "worker-cls", "worker-extension-cls",
    "enable-multimodal-encoder-data-parallel",
})

SCHEDULER = frozenset({
    "max-num-batched-tokens", "max-num-seqs", "max-num-partial-prefills", "max-long-partial-prefills",
    "long-prefill-token-threshold", "cuda-graph-sizes", "enable-chunked-prefill", "disable-chunked-mm-input",
    "scheduler-cls", "disable-hybrid-kv-cache-manager", "async-scheduling", "scheduling-policy",
    "num-lookahead-slots",
})

LORA = frozenset({
    "enable-lora", "enable-lora-bias", "max-loras", "max-lora-rank", "lora-dtype", "max-cpu-loras",
    "fully-sharded-loras", "default-mm-loras",
})

OTHER = frozenset({
    # multimodal
    "limit-mm-per-prompt", "media-io-kwargs", "mm-processor-kwargs", "mm-processor-cache-gb",
    "mm-processor-cache-type", "mm-shm-cache-max-object-size-mb", "mm-encoder-tp-mode",
    "interleave-mm-strings", "skip-mm-profiling", "video-pruning-rate",
    # speculative decoding, structured outputs, reasoning
    "speculative-config", "structured-outputs-config", "reasoning-parser", "guided-decoding-backend",
    # observability
    "show-hidden-metrics-for-version", "otlp-traces-endpoint", "collect-detailed-traces",
    # compilation and the rest of the engine
    "compilation-config", "kv-transfer-config", "kv-events-config", "additional-config",
    "disable-log-stats", "enable-log-requests",
})

KNOWN = FRONTEND | MODEL | LOAD | CACHE | PARALLEL | SCHEDULER | LORA | OTHER


# Options that carry a secret, as normalised names (sparkguard.errors.option_name: lower case, _ -> -, no
# leading dashes), each with the setting that carries it instead: options land in a 0644 config, node.json,
# renders and the Ansible export.
SECRET_OPTIONS: dict[str, str] = {
    "api-key": "vllm.api_key_env or vllm.api_key_file instead; the key then reaches vLLM as VLLM_API_KEY through the"
               " 0600 env file",
    "hf-token": "vllm.hf_token_env or vllm.hf_token_file instead; the token then reaches vLLM as HF_TOKEN through the"
                " 0600 env file",
}


def secret_option(name: str) -> bool:
    """Whether ``name`` (however written: ``hf_token``, ``--API-Key``) is a secret or looks like one."""
    from sparkguard.errors import option_name, secret_looking

    return option_name(name) in SECRET_OPTIONS or secret_looking(name)


def option_problem(name: str) -> str | None:
    """Why ``name`` may not go into ``options``, or None. Never quotes the option's value."""
    import difflib

    from sparkguard.errors import option_name

    normal = option_name(name)
    if normal in SECRET_OPTIONS:
        return (f"is a secret ({normal}): options land in a 0644 config, node.json, renders and the Ansible"
                f" export. Set {SECRET_OPTIONS[normal]}")
    if secret_option(name) and normal not in KNOWN:
        return ("looks like a secret, and options land in a 0644 config, node.json, renders and the Ansible export;"
                " it is not a `vllm serve` option either. A Hugging Face token goes in vllm.hf_token_env or"
                " vllm.hf_token_file, an API key in vllm.api_key_env or vllm.api_key_file")
    if name.startswith("-"):
        return f"write option names without leading dashes (e.g. '{name.lstrip('-')}')"
    if name in MANAGED:
        return ("is set by sparkguard from the budget and the model's settings (model, weights_dtype,"
                " kv_cache_dtype, max_model_len, max_num_seqs, kv_cache_gib, port, vllm.listen); set those instead")
    if normal != name and (normal in KNOWN or normal.removeprefix("no-") in KNOWN):
        return f"vLLM config keys are lower case with dashes: write '{normal}'"
    if name in KNOWN or (name.startswith("no-") and name[3:] in KNOWN):
        return None
    close = difflib.get_close_matches(name, sorted(KNOWN), n=1, cutoff=0.75)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return (f"not a `vllm serve` option of vLLM {VLLM_VERSION}{hint}; the list is in roles/vllm/options.py"
            f" (from `vllm serve --help=all`)")
