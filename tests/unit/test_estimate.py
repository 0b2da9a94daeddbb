"""The training-memory estimator: calibration against the incident, physical properties, CLI.

The calibration points come from the incident report (gemma-4-26B-A4B LoRA r16,
bf16, gradient checkpointing: seq 8,000 -> ~80 GB, seq 16,000 -> above 110 GB).
The property tests walk grids of configurations, so a sign error or a dropped
term in any component shows up as a broken ordering somewhere.
"""

from __future__ import annotations

import json
import re

import pytest

from sparkguard.cli import main as cli
from sparkguard.domain.memory.estimate import (
    TrainingSpec,
    estimate_training,
    kv_bytes_per_token,
    kv_cache_bytes,
    largest_seq_len,
    load_model,
)
from sparkguard.domain.memory.estimate.training import GIB
from sparkguard.errors import ConfigError
from tests.conftest import REPO

GEMMA4 = load_model("gemma-4-26B-A4B")
LLAMA = load_model("Llama-3.1-8B")
INCIDENT = TrainingSpec(GEMMA4, method="lora", rank=16, seq_len=8000, micro_batch=1, dtype="bf16",
                        gradient_checkpointing=True, attn="sdpa", loss="standard")


def peak(spec: TrainingSpec, **changes) -> int:
    return estimate_training(spec.with_(**changes)).peak_bytes


# --- calibration ---------------------------------------------------------------


def test_incident_8k_is_about_80_gb():
    assert 72e9 <= peak(INCIDENT) <= 88e9


def test_incident_16k_is_above_110_gb():
    assert 110e9 <= peak(INCIDENT, seq_len=16000) <= 135e9


def test_incident_growth_is_dominated_by_14_bytes_of_logits_per_vocab_entry():
    """Field facts: the slope is ~3.75 MB/token and it is the logits, not the layers."""
    small, large = estimate_training(INCIDENT), estimate_training(INCIDENT.with_(seq_len=16000))
    slope = (large.peak_bytes - small.peak_bytes) / 8000
    assert 3.3e6 <= slope <= 4.3e6
    assert small.components["logits"] == 8000 * 262144 * 14
    assert small.phase == "loss backward"


def test_weights_are_about_50_5_gb():
    assert 50.0e9 <= estimate_training(INCIDENT).components["weights"] <= 51.0e9


# --- models --------------------------------------------------------------------


@pytest.mark.parametrize("name, low, high", [
    ("gemma-4-26B-A4B", 25.0e9, 25.5e9),  # "about 25.2B"
    ("gemma-3-27B", 26.5e9, 27.5e9),  # text model only
    ("Qwen3-30B-A3B", 30.2e9, 30.8e9),  # 30.5B
    ("Llama-3.1-8B", 8.0e9, 8.06e9),  # 8.03B
])
def test_preset_parameter_counts_match_the_published_sizes(name, low, high):
    assert low <= load_model(name).params <= high


def _gemma4_config() -> dict:
    layer_types = (["sliding_attention"] * 5 + ["full_attention"]) * 5
    return {
        "architectures": ["Gemma4ForConditionalGeneration"], "model_type": "gemma4", "tie_word_embeddings": True,
        "text_config": {
            "model_type": "gemma4_text", "hidden_size": 2816, "num_hidden_layers": 30, "intermediate_size": 2112,
            "num_attention_heads": 16, "num_key_value_heads": 8, "num_global_key_value_heads": 2, "head_dim": 256,
            "global_head_dim": 512, "attention_k_eq_v": True, "enable_moe_block": True, "num_experts": 128,
            "top_k_experts": 8, "moe_intermediate_size": 704, "vocab_size": 262144, "sliding_window": 1024,
            "final_logit_softcapping": 30.0, "layer_types": layer_types, "max_position_embeddings": 262144,
        },
        "vision_config": {"hidden_size": 1152},
    }


def test_nested_text_config_parses_like_the_preset(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(_gemma4_config()))
    parsed = load_model(str(path))
    assert parsed.params == GEMMA4.params
    assert parsed.layers == GEMMA4.layers
    assert parsed.final_logit_softcap == 30.0
    assert [layer.attention.head_dim for layer in parsed.layers[:6]] == [256] * 5 + [512]
    assert peak(INCIDENT.with_(model=parsed)) == peak(INCIDENT)


def test_directory_with_config_json_is_accepted(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(_gemma4_config()))
    assert load_model(str(tmp_path)).params == GEMMA4.params


def test_flat_dense_config_parses_like_the_llama_preset(tmp_path):
    config = {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
              "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(config))
    parsed = load_model(str(tmp_path / "config.json"))
    assert parsed.params == LLAMA.params and parsed.layers == LLAMA.layers


def test_qwen3_moe_config_has_no_dense_mlp(tmp_path):
    config = {"model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
              "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "moe_intermediate_size": 768,
              "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936, "tie_word_embeddings": False,
              "sliding_window": None, "mlp_only_layers": []}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert load_model(str(tmp_path / "config.json")).params == load_model("Qwen3-30B-A3B").params


# --- properties ----------------------------------------------------------------

SPECS = [
    TrainingSpec(model, method=method, gradient_checkpointing=gc, attn=attn, loss=loss)
    for model in (GEMMA4, LLAMA, load_model("Qwen3-30B-A3B"))
    for method in ("full", "lora", "qlora")
    for gc in (True, False)
    for attn in ("flash", "sdpa")
    for loss in ("standard", "chunked")
]
SEQ_LENS = [1, 128, 1000, 1024, 1025, 4096, 8000, 16000, 32768]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.model.name}-{s.method}-gc{int(s.gradient_checkpointing)}-{s.attn}-{s.loss}")
def test_peak_is_monotonic_in_seq_len_and_micro_batch(spec):
    by_seq = [peak(spec, seq_len=s) for s in SEQ_LENS]
    assert by_seq == sorted(by_seq) and by_seq[0] < by_seq[-1]
    by_batch = [peak(spec, seq_len=2048, micro_batch=b) for b in (1, 2, 3, 8)]
    assert by_batch == sorted(by_batch) and by_batch[0] < by_batch[-1]


@pytest.mark.parametrize("model", [GEMMA4, LLAMA, load_model("gemma-3-27B")], ids=lambda m: m.name)
@pytest.mark.parametrize("seq_len", [512, 8000])
def test_qlora_below_lora_below_full(model, seq_len):
    spec = TrainingSpec(model, seq_len=seq_len, gradient_checkpointing=True)
    assert peak(spec, method="qlora") < peak(spec, method="lora") < peak(spec, method="full")


def test_full_finetune_costs_16_bytes_per_parameter_before_activations():
    e = estimate_training(TrainingSpec(LLAMA, method="full", seq_len=16))
    assert e.components["weights"] + e.components["trainable_state"] == 16 * LLAMA.params


def test_all_linear_adapts_more_than_attention():
    spec = INCIDENT.with_(target="attention")
    assert estimate_training(spec.with_(target="all-linear")).components["trainable_state"] > \
        estimate_training(spec).components["trainable_state"] > 0


@pytest.mark.parametrize("model", [GEMMA4, LLAMA], ids=lambda m: m.name)
def test_checkpointing_lowers_activations_and_peak(model):
    spec = TrainingSpec(model, seq_len=4096, gradient_checkpointing=False)
    off, on = estimate_training(spec), estimate_training(spec.with_(gradient_checkpointing=True))
    assert on.components["activations"] < off.components["activations"] / 10
    assert on.components["recompute"] > 0 == off.components["recompute"]
    assert on.peak_bytes < off.peak_bytes


@pytest.mark.parametrize("model", [GEMMA4, LLAMA], ids=lambda m: m.name)
def test_chunked_loss_lowers_the_logits_term(model):
    spec = TrainingSpec(model, seq_len=8000, gradient_checkpointing=True)
    standard, chunked = estimate_training(spec), estimate_training(spec.with_(loss="chunked"))
    assert chunked.components["logits"] < standard.components["logits"] / 10
    assert chunked.peak_bytes < standard.peak_bytes


def test_flash_removes_attention_scores_on_a_dense_model():
    for gc in (True, False):
        spec = TrainingSpec(LLAMA, seq_len=4096, gradient_checkpointing=gc)
        assert estimate_training(spec.with_(attn="flash")).components["attention_scores"] == 0
        assert estimate_training(spec.with_(attn="sdpa")).components["attention_scores"] > 0


def test_flash_keeps_scores_for_gemma4_global_layers_with_head_dim_512():
    s = 4096
    spec = TrainingSpec(GEMMA4, seq_len=s, gradient_checkpointing=False)
    flash = estimate_training(spec.with_(attn="flash"))
    sdpa = estimate_training(spec.with_(attn="sdpa"))
    one_layer = 16 * s * s * 2  # heads x s^2 x bf16
    # 5 global layers keep their probabilities, plus one layer's raw scores in flight
    assert flash.components["attention_scores"] == 5 * one_layer + one_layer
    assert sdpa.components["attention_scores"] == 30 * one_layer + one_layer
    assert any("head_dim" in note for note in flash.notes)


def test_eager_attention_costs_more_than_sdpa():
    spec = TrainingSpec(LLAMA, seq_len=4096, gradient_checkpointing=True)
    assert estimate_training(spec.with_(attn="eager")).components["attention_scores"] > \
        estimate_training(spec.with_(attn="sdpa")).components["attention_scores"]


def test_peak_follows_its_formula():
    for spec in (INCIDENT, INCIDENT.with_(gradient_checkpointing=False), INCIDENT.with_(attn="eager", seq_len=30000)):
        e = estimate_training(spec)
        c = e.components
        fixed = c["weights"] + c["trainable_state"] + c["activations"] + c["cuda_overhead"]
        if spec.gradient_checkpointing:
            assert e.peak_bytes == fixed + max(c["logits"], c["recompute"] + c["attention_scores"])
        else:
            assert e.peak_bytes == fixed + c["attention_scores"] + c["logits"]
    # at 30k tokens with eager attention one layer's score matrix outgrows the logits
    assert estimate_training(INCIDENT.with_(attn="eager", seq_len=30000)).phase == "layer recompute"


# --- fitting a budget ------------------------------------------------------------


def test_largest_seq_len_is_the_boundary():
    budget = 100 * GIB
    n = largest_seq_len(INCIDENT, budget)
    assert 8000 < n < 16000
    assert peak(INCIDENT, seq_len=n) <= budget < peak(INCIDENT, seq_len=n + 1)


def test_largest_seq_len_when_nothing_or_everything_fits():
    assert largest_seq_len(INCIDENT, 10 * GIB) == 0  # the weights alone are 47 GiB
    assert largest_seq_len(TrainingSpec(LLAMA, method="qlora", loss="chunked", gradient_checkpointing=True,
                                        attn="flash"), 10**15, upper=4096) == 4096


# --- errors ------------------------------------------------------------------------


def _problem_fields(excinfo) -> list[str]:
    return [p.field for p in excinfo.value.problems]


def test_unknown_preset_is_a_config_error():
    with pytest.raises(ConfigError) as excinfo:
        load_model("gemma-5-1T")
    assert _problem_fields(excinfo) == ["--model"]
    assert "gemma-4-26B-A4B" in str(excinfo.value)


def test_missing_path_and_unreadable_config_are_config_errors(tmp_path):
    with pytest.raises(ConfigError):
        load_model(str(tmp_path / "absent" / "config.json"))
    (tmp_path / "config.json").write_text('{"hidden_size": 8}')
    with pytest.raises(ConfigError) as excinfo:
        load_model(str(tmp_path / "config.json"))
    assert _problem_fields(excinfo) == ["--model"]


@pytest.mark.parametrize("changes, field", [
    ({"rank": 0}, "--rank"), ({"rank": -4}, "--rank"), ({"seq_len": 0}, "--seq-len"),
    ({"seq_len": -1}, "--seq-len"), ({"micro_batch": 0}, "--micro-batch"), ({"method": "dora"}, "--method"),
])
def test_bad_inputs_are_config_errors(changes, field):
    with pytest.raises(ConfigError) as excinfo:
        estimate_training(INCIDENT.with_(**changes))
    assert _problem_fields(excinfo) == [field]


# --- vLLM KV cache ---------------------------------------------------------------------


def test_kv_bytes_per_token():
    assert kv_bytes_per_token(LLAMA) == 2 * 8 * 128 * 2 * 32
    # Gemma 4: 25 sliding layers of 8x256, 5 global layers of 2x512
    assert kv_bytes_per_token(GEMMA4) == 25 * 2 * 8 * 256 * 2 + 5 * 2 * 2 * 512 * 2


def test_sliding_layers_are_capped_at_their_window():
    tokens = 100_000
    assert kv_cache_bytes(GEMMA4, tokens) == 25 * 2 * 8 * 256 * 2 * 1024 + 5 * 2 * 2 * 512 * 2 * tokens
    assert kv_cache_bytes(GEMMA4, 512) == kv_bytes_per_token(GEMMA4) * 512
    assert kv_cache_bytes(LLAMA, 1000, dtype_bytes=1) == kv_bytes_per_token(LLAMA) * 1000 // 2


# --- CLI -----------------------------------------------------------------------------------


@pytest.fixture
def sparkguard(monkeypatch, capsys):
    """Run ``sparkguard ...`` in-process, with estimate registered even before cli/main.py lists it."""
    if "estimate" not in cli.COMMANDS:
        monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, "estimate"))

    def run(*argv: str):
        code = cli.main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


INCIDENT_ARGS = ("estimate", "--model", "gemma-4-26B-A4B", "--method", "lora", "--rank", "16", "--seq-len", "8000",
                 "--micro-batch", "1", "--dtype", "bf16", "--gradient-checkpointing", "--attn", "sdpa",
                 "--loss", "standard")


def test_cli_json(sparkguard):
    code, out, _ = sparkguard(*INCIDENT_ARGS, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["peak_bytes"] == peak(INCIDENT)
    assert set(data["components"]) == set(data["formulas"]) >= {"weights", "logits", "attention_scores"}
    assert all(isinstance(v, int) for v in data["components"].values())
    assert data["inputs"]["seq_len"] == 8000 and data["inputs"]["gradient_checkpointing"] is True


def test_cli_table_shows_gb_and_gib(sparkguard):
    code, out, _ = sparkguard(*INCIDENT_ARGS, "--budget-gib", "100")
    assert code == 0
    e = estimate_training(INCIDENT)
    assert f"{e.peak_bytes / 1e9:.2f}" in out and f"{e.peak_bytes / GIB:.2f}" in out
    assert f"{largest_seq_len(INCIDENT, 100 * GIB):,}" in out


def test_cli_defaults_match_the_inventory_defaults(sparkguard):
    """The README's incident number comes out without flags: checkpointing is on by default, as in the inventory."""
    from sparkguard.roles.budget.settings import TrainingJob

    code, out, _ = sparkguard("estimate", "--model", "gemma-4-26B-A4B", "--method", "lora", "--rank", "16",
                              "--seq-len", "8000", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["inputs"]["gradient_checkpointing"] is TrainingJob.model_fields["gradient_checkpointing"].default is True
    assert data["peak_bytes"] == peak(INCIDENT)
    code, out, _ = sparkguard("estimate", "--model", "gemma-4-26B-A4B", "--method", "lora", "--rank", "16",
                              "--seq-len", "8000", "--no-gradient-checkpointing", "--json")
    assert json.loads(out)["peak_bytes"] > peak(INCIDENT)


@pytest.mark.parametrize("argv, field", [
    (("--model", "no-such-model"), "--model"),
    (("--model", "/nonexistent/config.json"), "--model"),
    (("--model", "Llama-3.1-8B", "--rank", "0"), "--rank"),
    (("--model", "Llama-3.1-8B", "--seq-len", "0"), "--seq-len"),
])
def test_cli_bad_input_exits_2_with_a_paragraph(sparkguard, argv, field):
    code, out, err = sparkguard("estimate", *argv)
    assert code == 2
    assert f"field '{field}'" in err and "Traceback" not in err


# --- the docs stay honest ----------------------------------------------------------------


def test_docs_name_every_component_and_report_the_current_numbers():
    text = (REPO / "docs" / "estimator.md").read_text()
    for name in estimate_training(INCIDENT).components:
        assert f"`{name}`" in text, name
    for spec in (INCIDENT, INCIDENT.with_(seq_len=16000)):
        assert f"{peak(spec) / 1e9:.1f} GB" in text
    torchtune = TrainingSpec(LLAMA, method="lora", rank=8, target="all-linear", seq_len=2048, micro_batch=2,
                             gradient_checkpointing=True, attn="flash", loss="chunked")
    assert f"{peak(torchtune) / GIB:.1f} GiB" in text
    assert re.search(r"16\.2 GiB", text)


def test_a_reader_that_goes_away_is_no_traceback():
    """`sparkguard ... | head`: the pipe closes before the report is written; exit 141 as a shell tool, quiet."""
    import subprocess

    from tests.conftest import REPO, SPARKGUARD

    process = subprocess.Popen([*SPARKGUARD, *INCIDENT_ARGS, "--json"], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()                     # the reader is gone before anything was written
    err = process.stderr.read().decode()
    assert process.wait(timeout=60) == 141, err
    assert "Traceback" not in err, err
