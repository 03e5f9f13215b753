"""``python -m grpo_ext.experiments.study.signal``: the measurement's table and JSON for a grid of objectives, samples a
step and LoRA ranks."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from grpo_ext.errors import UserError
from grpo_ext.experiments.study.signal.cosines import LOSS_TYPES
from grpo_ext.experiments.study.signal.measure import OBJECTIVES, measure_grid

__all__ = ["main", "table"]


COLUMNS = ("objective", "samples", "prompts x G", "LoRA r", "mean cosine", "95% interval", "zero-std", "seconds")


def table(rows: Sequence[dict], mark: int | None = None) -> str:
    """The rows of :func:`measure_signal` as a Markdown table; the samples a step `mark` (a study's: the batch size
    its arms train at) in bold, "(arms)" beside it."""

    def cells(r: dict) -> list[str]:
        interval = "-" if r["low"] is None else f"[{r['low']:+.4f}, {r['high']:+.4f}]"
        zero_std = "-" if r["zero_std_share"] is None else f"{r['zero_std_share']:.2f}"
        rank = str(r["lora_rank"]) if r["lora_rank"] else "full"
        shape = f"{r['prompts']} x {r['group_size']}"
        samples = f"**{r['samples']}** (arms)" if r["samples"] == mark else str(r["samples"])
        values = [r["objective"], samples, shape, rank, f"{r['mean_cosine']:+.4f}", interval, zero_std]
        return [*values, f"{r['seconds']:.1f}"]

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    return "\n".join(lines + ["| " + " | ".join(cells(r)) + " |" for r in rows])


def _names(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def _ints(text: str) -> list[int]:
    return [int(v) for v in _names(text)]  # argparse turns a ValueError into a usage error naming the flag


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        prog="python -m grpo_ext.experiments.study.signal", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--model", default="embedded", help="`embedded`, a model folder or a hub id")
    parser.add_argument("--task", default="arithmetic")
    parser.add_argument("--task-kwargs", default="{}", help="the task's knobs as JSON (a method config's task_kwargs)")
    parser.add_argument("--objective", type=_names, default="grpo", help=f"comma-separated, of {', '.join(OBJECTIVES)}")
    parser.add_argument("--samples", type=_ints, default="64,256", help="comma-separated samples a step")
    parser.add_argument(
        "--minibatches", type=int, default=6, help="independent minibatches per setting (>= 3 for an interval)"
    )
    parser.add_argument("--num-generations", type=int, default=8, help="GRPO's group size")
    parser.add_argument("--lora-rank", type=_ints, default="0", help="comma-separated LoRA ranks; 0 = all parameters")
    parser.add_argument(
        "--train-offset",
        type=int,
        default=0,
        help="train prompts skipped first (0: the base is fine-tuned on the task's separate sft split)",
    )
    parser.add_argument("--max-completion-length", type=int, default=48)
    parser.add_argument("--loss-type", default="dapo", choices=LOSS_TYPES, help="TRL's loss_type (its reduction)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--micro-batch", type=int, default=64, help="rows a forward/backward (memory only)")
    parser.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    parser.add_argument("--out", default=None, help="JSON file to write (atomically)")
    args = parser.parse_args(argv)
    unknown = [o for o in args.objective if o not in OBJECTIVES]
    if unknown or not args.objective:  # before the model is loaded
        raise UserError(f"--objective: {', '.join(unknown) or 'none given'}; expected some of {', '.join(OBJECTIVES)}")

    from grpo_ext.evaluation.backends import load_model_and_tokenizer
    from grpo_ext.evaluation.cli import task_kwargs_flag
    from grpo_ext.io import atomic_write_json
    from grpo_ext.tasks import get_task

    task_kwargs = task_kwargs_flag(args.task_kwargs)
    task = get_task(args.task, **task_kwargs)
    model, tokenizer = load_model_and_tokenizer(args.model, device=args.device)
    rows = measure_grid(
        model,
        tokenizer,
        task,
        args.objective,
        args.samples,
        args.minibatches,
        args.lora_rank,
        group_size=args.num_generations,
        train_offset=args.train_offset,
        max_completion_length=args.max_completion_length,
        loss_type=args.loss_type,
        temperature=args.temperature,
        seed=args.seed,
        micro_batch=args.micro_batch,
    )
    print(table(rows))
    result = {
        "model": args.model,
        "task": args.task,
        "task_kwargs": task_kwargs,
        "device": str(next(model.parameters()).device),
        "settings": {k: v for k, v in vars(args).items() if k not in ("model", "task", "task_kwargs", "out")},
        "rows": rows,
    }
    if args.out:
        atomic_write_json(args.out, result)
    return result
