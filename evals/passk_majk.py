"""Pass@K vs Maj@K of one or more models on a verifiable task (DeepSeekMath, Figure 7), with pass^k, Cover@tau,
answer diversity, bootstrap intervals over problems and, with several models, base-against-RL comparisons.

    python evals/passk_majk.py                                   # the embedded model on the arithmetic task
    python evals/passk_majk.py --model embedded --model outputs/qlora --n 64 --k 1,2,4,8,16,32,64 --out runs/cmp
    python evals/passk_majk.py --model Qwen/Qwen2.5-Math-1.5B --model my/rl-model --task gsm8k --n 1024 --backend vllm
    python evals/passk_majk.py --model base --model rl --task word_arithmetic --by operation --stop none

Writes into --out: report.md (tables, every mean with its 95% interval; per slice of the problems, --by; the strict
answer form beside pass@1; what moved problem by problem; the failure anatomy), report.json (every number, per
problem and per slice too, and the bootstrap seed and resamples), samples_excerpt.jsonl (samples 0 and 1 of every
problem per model, small enough to commit), passk_majk.png (Pass@K solid, Maj@K dashed, one colour per model,
interval bands), per_problem_accuracy.png (two or more models: each against the first, problem by problem) and
samples.jsonl, the resumable sample cache: run the same command again after a crash and only the missing samples
are drawn; change --k, --tau or the task's answer checker and the report is recomputed from the cached samples
without sampling. With two or more models the first --model is A (e.g. the base) and each later one is a B (e.g.
the RL model): differences B - A paired by problem, the solved-set overlap at each k and the k where the pass@k
curves cross. Bad input ends with one line and exit code 2 (--debug shows the traceback).
"""

from __future__ import annotations

import sys

from grpo_ext.cli import run_cli
from grpo_ext.evaluation.passk_majk import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    run_cli(main, sys.argv[1:])
