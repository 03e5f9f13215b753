"""Iterative RL with GRPO (DeepSeekMath 4.1.4), three arms over the same budget and seeds: the reward model
retrained every iteration on the policy's samples with ~10% replay (`iterative`), the iteration-0 RM throughout
(`frozen`), the rule-based verifier (`verifier`); the reference is reset to the policy every iteration. YAML
through TrlParser; flags override it.

    python scripts/iterative.py --config configs/iterative.yaml --report_dir results/iterative   # ~20 min, 2 cores
    python scripts/iterative.py --config configs/iterative_quick.yaml                            # ~2 min

A killed run started again with the same command resumes: no finished iteration of an arm and seed is redone.
"""

from __future__ import annotations


def parse_args(argv: list[str]):
    from trl import ModelConfig

    from grpo_ext.cli import parse_trl_config
    from grpo_ext.config import GRPOExtConfig
    from grpo_ext.iterative import IterativeArguments

    return parse_trl_config((IterativeArguments, GRPOExtConfig, ModelConfig), argv)


def main(argv: list[str]) -> None:
    from transformers.utils import logging as hf_logging

    from grpo_ext.iterative import Experiment
    from grpo_ext.iterative.report import report_folder

    hf_logging.disable_progress_bar()  # no bar for every model load (policy, RM) of every iteration
    it_args, training_args, model_args = parse_args(argv)
    experiment = Experiment(it_args, training_args, model_args)
    report_folder(experiment.report_dir).check()  # a report_dir of the user's files: refused before any training
    experiment.run()
    print((experiment.report_dir / "report.md").read_text())
    print(f"[iterative] report in {experiment.report_dir}")


if __name__ == "__main__":
    from grpo_ext.cli import run_cli

    run_cli(main)
