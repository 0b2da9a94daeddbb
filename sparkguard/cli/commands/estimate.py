"""sparkguard estimate --model M --seq-len N ...: will this fine-tune fit? (no GPU, no network)

Prints each memory component with its formula, in GB and GiB (vendors sell GB,
``free`` and PyTorch report GiB; confusing the two costs 7%).
"""

from __future__ import annotations

import argparse
import json

from ...domain.memory.estimate import TrainingSpec, estimate_training, largest_seq_len, load_model
from ...domain.memory.estimate.training import ATTENTION, GB, GIB, LOSSES, METHODS, TARGETS, Estimate
from ...errors import EXIT_DOES_NOT_FIT
from . import Subcommands

DTYPES = ("bf16", "fp16", "fp32")


def register(sub: Subcommands) -> None:
    parser = sub.add_parser("estimate", help="estimate the peak memory of a fine-tune before running it")
    parser.add_argument("--model", required=True, help="preset name or path to a Hugging Face config.json")
    parser.add_argument("--method", choices=METHODS, default="lora")
    parser.add_argument("--rank", type=int, default=16, help="LoRA rank (lora/qlora)")
    parser.add_argument("--target", choices=TARGETS, default="attention", help="LoRA target modules")
    parser.add_argument("--seq-len", type=int, default=2048, help="tokens per sample")
    parser.add_argument("--micro-batch", type=int, default=1, help="samples per forward pass")
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    # On by default, as in the inventory (budget.training.gradient_checkpointing): one command, one number.
    parser.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True,
                        help="activation checkpointing (default: on, as the inventory's default)")
    parser.add_argument("--attn", choices=ATTENTION, default="sdpa", help="attention implementation")
    parser.add_argument("--loss", choices=LOSSES, default="standard", help="chunked = fused linear cross-entropy")
    parser.add_argument("--budget-gib", type=float, help="also report the longest seq_len that fits this many GiB")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(func=run)


def spec_from_args(args: argparse.Namespace) -> TrainingSpec:
    return TrainingSpec(
        model=load_model(args.model), method=args.method, rank=args.rank, target=args.target,
        seq_len=args.seq_len, micro_batch=args.micro_batch, dtype=args.dtype,
        gradient_checkpointing=args.gradient_checkpointing, attn=args.attn, loss=args.loss,
    )


def run(args: argparse.Namespace) -> int:
    """Exit 0, or 3 (EXIT_DOES_NOT_FIT) when --budget-gib is given and the job as asked does not fit in it."""
    spec = spec_from_args(args)
    estimate = estimate_training(spec)
    fit = fits = None
    if args.budget_gib is not None:
        budget = int(args.budget_gib * GIB)
        fit = largest_seq_len(spec, budget)
        fits = estimate.peak_bytes <= budget
    if args.json:
        out = estimate.to_dict()
        if fit is not None:
            out["budget"] = {"bytes": int(args.budget_gib * GIB), "largest_seq_len": fit, "fits": fits}
        print(json.dumps(out, indent=2))
    else:
        _print_table(estimate, fit, args.budget_gib, fits)
    return EXIT_DOES_NOT_FIT if fits is False else 0


def _print_table(estimate: Estimate, fit: int | None, budget_gib: float | None, fits: bool | None) -> None:
    from rich.table import Table

    from ..console import console as make_console

    spec = estimate.spec
    table = Table(title=(
        f"{spec.model.name}: {spec.method}"
        + (f" r{spec.rank} ({spec.target})" if spec.method != "full" else "")
        + f", seq {spec.seq_len:,} x batch {spec.micro_batch}, {spec.dtype}, "
        f"checkpointing {'on' if spec.gradient_checkpointing else 'off'}, attn {spec.attn}, loss {spec.loss}"
    ))
    table.add_column("component")
    table.add_column("GB", justify="right")
    table.add_column("GiB", justify="right")
    table.add_column("formula", overflow="fold")
    for name, term in estimate.terms.items():
        table.add_row(name, f"{term.bytes / GB:.2f}", f"{term.bytes / GIB:.2f}", term.formula)
    table.add_row(
        "[bold]peak[/bold]", f"[bold]{estimate.peak_bytes / GB:.2f}[/bold]",
        f"[bold]{estimate.peak_bytes / GIB:.2f}[/bold]", f"{estimate.peak_formula} (set by the {estimate.phase})",
    )
    console = make_console()
    console.print(table)
    for note in estimate.notes:
        console.print(f"note: {note}")
    if fit is not None:
        console.print(f"longest seq_len within {budget_gib:g} GiB: {fit:,}" if fit else
                      f"does not fit in {budget_gib:g} GiB at any seq_len")
    if fits is not None:
        console.print(f"verdict: {'FITS' if fits else 'DOES NOT FIT'} in {budget_gib:g} GiB at seq_len "
                      f"{spec.seq_len:,}")
