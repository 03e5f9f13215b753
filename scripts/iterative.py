"""Iterative RL with GRPO (DeepSeekMath 4.1.4), three arms over the same budget and seeds: the reward model
retrained every iteration on the policy's samples with ~10% replay (`iterative`), the iteration-0 RM throughout
(`frozen`), the rule-based verifier (`verifier`); the reference is reset to the policy every iteration. YAML
through TrlParser; flags override it.

    python scripts/iterative.py --config configs/iterative.yaml --report_dir results/iterative   # ~20 min, 2 cores
    python scripts/iterative.py --config configs/iterative_quick.yaml                            # ~2 min

A killed run started again with the same command resumes: no finished iteration of an arm and seed is redone.

    --estimate   print the experiment's cost from the config's planning rates (and what the saved runs spent); runs
                 nothing
    --quick      rehearse a real-model config on a tiny random model with the real tokenizer
                 (grpo_ext.experiments.iterative.rehearsal), in <output_dir>_quick unless --output_dir is given;
                 --rehearsal-tokenizer: another tokenizer's folder (the tests', without `make real-model`); its
                 tiny model is kept in <output_dir>/rehearsal_start (outputs/tiny_models/ for the real tokenizer's)
"""

from __future__ import annotations


def parse_args(argv: list[str]):
    from trl import ModelConfig

    from grpo_ext.cli import parse_trl_config
    from grpo_ext.config import GRPOExtConfig
    from grpo_ext.experiments.iterative import IterativeArguments

    return parse_trl_config((IterativeArguments, GRPOExtConfig, ModelConfig), argv)


def _pop_flag(argv: list[str], flag: str) -> tuple[bool, list[str]]:
    found = flag in argv
    return found, [a for a in argv if a != flag]


def _pop_value(argv: list[str], flag: str) -> tuple[str | None, list[str]]:
    if flag not in argv:
        return None, argv
    i = argv.index(flag)
    if i + 1 >= len(argv):
        from grpo_ext.errors import UserError

        raise UserError(f"{flag}: expected a value")
    return argv[i + 1], argv[:i] + argv[i + 2 :]


def estimate(argv: list[str]) -> None:
    """The cost of the experiment ``argv`` describes, and the spend of its saved runs (none run here)."""
    from pathlib import Path

    from grpo_ext.experiments.iterative.budget import estimate as price
    from grpo_ext.experiments.iterative.budget import render_estimate, spent_core_hours
    from grpo_ext.experiments.iterative.experiment import seed_dir
    from grpo_ext.experiments.iterative.iteration_zero import START_DIR, START_STATE_FILE
    from grpo_ext.experiments.iterative.state import LOOP_STATE_FILE, load_state

    it_args, training_args, _ = parse_args(argv)
    seeds = it_args.seed_list if it_args.seed_list is not None else [int(training_args.seed)]
    run_dir, states = Path(training_args.output_dir), {}
    for seed in seeds:
        start = load_state(seed_dir(run_dir, seed) / START_DIR, START_STATE_FILE)
        for arm in it_args.arm_list:
            state = load_state(seed_dir(run_dir, seed) / arm, LOOP_STATE_FILE)
            if state is None and start is not None:
                state = {"history": [start["row"]]}
            if state is not None:
                states.setdefault(arm, {})[seed] = state
    print(render_estimate(price(it_args, training_args), spent_core_hours(states) if states else None))


def rehearsal_argv(argv: list[str], tokenizer: str | None) -> list[str]:
    """``argv`` made a rehearsal: a tiny random start with the config's model's tokenizer (or ``tokenizer``), the
    quick sizes, its own output folder."""
    from pathlib import Path

    from grpo_ext.experiments.iterative.rehearsal import quick_argv, rehearsal_start
    from grpo_ext.tasks import get_task

    it_args, training_args, _ = parse_args(argv)
    given = "--output_dir" in argv
    output_dir = training_args.output_dir if given else f"{training_args.output_dir.rstrip('/')}_quick"
    source = tokenizer or "smollm2-135m-instruct"  # the real model's tokenizer (make real-model caches it)
    # the tiny model: in outputs/tiny_models/ for the real tokenizer, beside the start for another one (as
    # scripts/run_methods.py keeps it in --out): two rehearsals on other tokenizers never write into one folder
    folder = Path(output_dir) / "rehearsal_start"
    tiny_models = folder if tokenizer else Path(__file__).resolve().parent.parent / "outputs" / "tiny_models"
    start, sha = rehearsal_start(source, folder, get_task(it_args.task, **it_args.task_kwargs), tiny_models)
    print(f"[iterative] --quick: rehearsing on {start} (random weights, {Path(source).name}'s tokenizer)", flush=True)
    return quick_argv(argv, start, sha, output_dir)


def main(argv: list[str]) -> None:
    from transformers.utils import logging as hf_logging

    from grpo_ext.experiments.iterative import Experiment
    from grpo_ext.experiments.iterative.report import report_folder

    hf_logging.disable_progress_bar()  # no bar for every model load (policy, RM) of every iteration
    quick, argv = _pop_flag(argv, "--quick")
    tokenizer, argv = _pop_value(argv, "--rehearsal-tokenizer")
    only_estimate, argv = _pop_flag(argv, "--estimate")
    if quick:
        argv = rehearsal_argv(argv, tokenizer)
    if only_estimate:
        estimate(argv)
        return
    it_args, training_args, model_args = parse_args(argv)
    experiment = Experiment(it_args, training_args, model_args)
    report_folder(experiment.report_dir).check()  # a report_dir of the user's files: refused before any training
    experiment.run()
    print((experiment.report_dir / "report.md").read_text())
    print(f"[iterative] report in {experiment.report_dir}")


if __name__ == "__main__":
    from grpo_ext.cli import run_cli

    run_cli(main)
