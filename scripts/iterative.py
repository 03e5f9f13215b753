"""Iterative RL with GRPO (DeepSeekMath 4.1.4): the reward model is retrained on the policy's samples with ~10%
replay and the reference is reset to the policy every iteration (YAML through TrlParser; flags override it).

    python scripts/iterative.py --config configs/iterative.yaml [--report_dir results/iterative]
    python scripts/iterative.py --config configs/iterative.yaml --iterations 1 --max_steps 3 ...   # quick

A killed run restarted with the same command resumes after its last finished iteration.
"""

from __future__ import annotations


def parse_args(argv: list[str]):
    from trl import ModelConfig

    from grpo_ext.cli import parse_trl_config
    from grpo_ext.config import GRPOExtConfig
    from grpo_ext.iterative import IterativeArguments

    return parse_trl_config((IterativeArguments, GRPOExtConfig, ModelConfig), argv)


def main(argv: list[str]) -> None:
    import time

    from grpo_ext.iterative import render_report, run_iterative

    it_args, training_args, model_args = parse_args(argv)
    start = time.perf_counter()
    state = run_iterative(it_args, training_args, model_args)
    print(render_report(state, it_args.eval_samples))
    report_dir = it_args.report_dir or f"{training_args.output_dir}/report"
    print(f"[iterative] done in {time.perf_counter() - start:.0f} s; report in {report_dir}")


if __name__ == "__main__":
    from grpo_ext.cli import run_cli

    run_cli(main)
