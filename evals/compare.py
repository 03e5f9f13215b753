"""SFT, RFT, online RFT, DPO and GRPO under DeepSeekMath's unified paradigm: one report for many trained runs.

    python evals/compare.py --run base=embedded --run rft@seed0=outputs/methods/seed0/rft \\
        --run grpo_outcome@seed0=outputs/methods/seed0/grpo_outcome ... --task arithmetic --n 64 --out results/compare

``--run NAME=CHECKPOINT``: NAME is a method (sft, rft, online_rft, dpo, grpo_outcome, grpo_process) or ``base``
(the starting model), optionally ``@LABEL`` (a seed: runs of one method with different labels are repeats, runs
of different methods with the same label are paired). CHECKPOINT is a model folder (``training_cost.json`` and
``learning_curve.json`` written by the method runners are read from it) or a JSON file of evaluation results.

Writes into --out: report.md (the paradigm table generated from grpo_ext.methods.METHODS beside each method's
pass@1, maj@k, pass@k and training cost, and the paper's four findings with a verdict), report.json (every
number), passk_majk.png (Pass@K and Maj@K per method), accuracy_vs_samples.png (learning curves against
training samples; final pass@1 against samples generated) and samples.jsonl (the resumable sample cache).
Every run is evaluated with the same sampling settings; results evaluated otherwise are refused unless
--allow-mixed-settings, which reports them under a warning. Bad input ends with one line and exit code 2.
"""

from __future__ import annotations

import sys

from grpo_ext.cli import run_cli
from grpo_ext.experiments.compare.cli import build_parser, main

__all__ = ["build_parser", "main"]

if __name__ == "__main__":
    run_cli(main, sys.argv[1:])
