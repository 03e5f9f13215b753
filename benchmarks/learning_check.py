"""Does the faster CPU recipe learn as well? Two 40-step GRPO runs, today's float32 recipe and the shipped one, same
seed and prompts, then validation pass@1 of both, paired by problem (issue 37, part 2).

    python -m benchmarks.learning_check [--out results/learning_check] [--limit 300] [--n 16] [--dry-run]

1. ``fp32``: ``scripts/train.py --config configs/real/cpu.yaml --cpu_bf16 off --generation_backend trl`` (the recipe
   before issue 37: float32 base, TRL's ``generate``); ``fast``: ``--config configs/real/cpu.yaml`` as shipped. Both
   ``--max_steps 40 --seed 0`` (the same prompts in the same order: TRL's sampler is seeded by ``seed``), into
   ``<out>/<name>/model``, a checkpoint every 5 steps.
2. ``evals/passk_majk.py --model <fp32> --model <fast>`` on the validation split (``--limit`` problems, ``--n``
   samples, T = 0.7, the config's task knobs), into ``<out>/validation``: the report's B - A pass@1 difference is
   paired by problem with a bootstrap interval (the harness's own comparison). Learning is intact when that interval
   holds 0 or lies above it.

Resumable: a finished run (``grpo_ext_run.json``: complete) is not trained again, an unfinished one continues from
its last checkpoint (``--resume_from_checkpoint``), and the harness's sample cache keeps what was already drawn. Cost
on one core: ~40 x 2-3 min (fp32) + ~40 x 1 min (fast) + 2 x 300 x 16 samples: ~3-4 hours. ``--dry-run`` prints the
commands it would run now and runs nothing.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG = "configs/real/cpu.yaml"
#: The recipes compared: name -> flags over the config (the first is A, the baseline; the second B).
RECIPES = {
    "fp32": ["--cpu_bf16", "off", "--generation_backend", "trl"],
    "fast": [],
}
TRAIN_FLAGS = ["--max_steps", "40", "--seed", "0", "--save_strategy", "steps", "--save_steps", "5"]
TRAIN_FLAGS += ["--save_total_limit", "2", "--disable_tqdm", "true"]


def train_command(name: str, out: Path, config: str = CONFIG) -> list[str] | None:
    """The command that trains (or finishes) recipe ``name``; None when its run is complete."""
    from grpo_ext.checkpoints import last_checkpoint, read_run_status

    model = out / name / "model"
    status = read_run_status(model) if model.exists() else None
    if status is not None and status.get("status") == "complete":
        return None
    cmd = [sys.executable, "scripts/train.py", "--config", config, *RECIPES[name], *TRAIN_FLAGS]
    cmd += ["--output_dir", str(model)]
    checkpoint = last_checkpoint(model) if model.exists() else None
    if checkpoint is not None:
        cmd += ["--resume_from_checkpoint", str(checkpoint)]
    elif status is not None:  # a run that stopped before its first checkpoint: start it again
        cmd += ["--overwrite_output_dir", "true"]
    return cmd


def eval_command(out: Path, limit: int, n: int, config: str = CONFIG) -> list[str]:
    recipe = yaml.safe_load((ROOT / config).read_text())
    cmd = [sys.executable, "evals/passk_majk.py"]
    for name in RECIPES:
        cmd += ["--model", str(out / name / "model")]
    cmd += ["--task", recipe["task"], "--task-kwargs", json.dumps(recipe.get("task_kwargs", {}))]
    cmd += ["--split", "validation", "--limit", str(limit), "--n", str(n), "--temperature", "0.7"]
    cmd += ["--k", "1,2,4,8,16" if n >= 16 else "1", "--seed", "0", "--no-progress", "--out", str(out / "validation")]
    return cmd


def main(argv: list[str] | None = None) -> list[list[str]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="results/learning_check", help="the runs and the validation report")
    parser.add_argument("--limit", type=int, default=300, help="validation problems (default: 300)")
    parser.add_argument("--n", type=int, default=16, help="samples per problem (default: 16)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    if args.limit < 300:
        print(f"--limit {args.limit}: fewer than 300 problems leaves the paired interval too wide", file=sys.stderr)
    out = Path(args.out) if Path(args.out).is_absolute() else ROOT / args.out
    commands = [c for c in (train_command(name, out) for name in RECIPES) if c is not None]
    commands.append(eval_command(out, args.limit, args.n))
    for cmd in commands:
        print("$ " + shlex.join(["python", *cmd[1:]]), flush=True)
        if not args.dry_run:
            subprocess.run(cmd, cwd=ROOT, check=True)
    if not args.dry_run:
        print(f"report: {out / 'validation' / 'report.md'} (B = fast, A = fp32: pass@1 difference paired by problem)")
    return commands


if __name__ == "__main__":
    main()
