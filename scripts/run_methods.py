"""The fair comparison: every arm searched on validation, its pick trained with every seed and scored on test.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python scripts/run_methods.py --study configs/compare.yaml --out results/compare
    python scripts/run_methods.py --study configs/compare.yaml --quick --out outputs/compare_quick   # minutes

0. Signal (when the study has a `signal` section): before any budget is spent, the mean gradient cosine between
   independent minibatches at the base, for each objective x samples a step, with the signal arm's method config
   (signal.json; the arms' batch size is chosen on it). --quick measures the arm's quick batch only, 3 minibatches.
1. Search: every (arm, setting) of the arms that search their own learning rate is trained with the search seed
   (`python -m grpo_ext.methods`, in a worker process; `--jobs` at a time) and scored on the validation split
   (validation.json in the run folder); each arm's best setting on validation is its pick.
2. Shared rates: every arm with `rate_of: <arm>` is trained with the search seed at that arm's picked learning rate
   (its own grid axes, if any, at that rate), scored on validation and picked the same way.
   search.json holds the grid, every score, the picks, and where each shared rate came from. Test numbers are
   never computed for a setting that was not picked, so they cannot enter a pick.
3. The picks are trained with every test seed (the search seed is none of them) and scored on test (test.json),
   the base too.
4. The report (report.md, report.json, plots) from those test results.

Baselines (the study's `baselines`: the base at another prompt, e.g. 8 worked examples) train nothing and are scored on
validation beside the base (search.json) and on test beside the picks (baselines/<name>/).

--report-only writes the report of a finished study from what its runs left in --out (their JSON records, what is
committed: no weights needed) and trains, samples and scores nothing; a missing test result is named, and every run
and evaluation it reads is checked as a resumed study checks it, the picks against its validation records.

--estimate prints what the study will cost (every run and evaluation at the planning rates of its `budget` section,
grpo_ext.experiments.study.budget) and exits. --quick on a study whose base is not the embedded model rehearses it on a
tiny random model with the base's tokenizer pipeline and chat template, its vocabulary retrained on the task's text
(outputs/tiny_models/; --rehearsal-tokenizer: another tokenizer's), every path of the real study in a minute; its
numbers mean nothing.

Resumable: signal.json is reused while its recorded settings are the current ones, a run folder holding
training_cost.json is never trained again, and evaluations resume from their sample caches, so an interrupted
command (or one spread over several sittings) picks up where it stopped.

This file is the command line (the flags checked, --estimate, the output folder held); the stages are
grpo_ext.experiments.study.stages', --report-only grpo_ext.experiments.study.report_only's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# --quick: 2 optimizer steps on 8 train prompts, then each method's own quick (or rehearsal) flags, which its paradigm
# entry holds (grpo_ext.methods.paradigm), and a tiny evaluation.
QUICK_COMMON = (
    "--max_steps 2 --train_size 8 --warmup_steps 0 --logging_steps 1 --curve_every 1 --curve_prompts 4 "
    "--gradient_accumulation_steps 1"
)
QUICK_EVALUATION = {"limit": 6, "n": 4, "max_new_tokens": 32, "n_by": ()}
QUICK_REHEARSAL_EVALUATION = {**QUICK_EVALUATION, "max_new_tokens": 16}
# --quick on a real base: the rehearsal model (a tiny random model with the base's tokenizer), kept between runs
TINY_MODELS = ROOT / "outputs" / "tiny_models"


def quick_method_flags(rehearsal: bool) -> dict[str, str]:
    """--quick's flags by runner (the study looks them up by its methods' runner), from the paradigm's entries."""
    from grpo_ext.methods import METHODS

    return {m.runner: m.rehearsal_flags if rehearsal else m.quick_flags for m in METHODS.values()}


def build_parser() -> argparse.ArgumentParser:
    from grpo_ext.evaluation.cli import HarnessArgumentParser

    parser = HarnessArgumentParser(prog="run_methods.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", default=str(ROOT / "configs" / "compare.yaml"), help="the study (YAML)")
    parser.add_argument("--out", default=None, help="output folder (default: results/compare)")
    parser.add_argument("--model", default=None, help="the base every arm starts from (default: the study's)")
    parser.add_argument(
        "--arms",
        default=None,
        help="comma-separated arms to run (default: all; a rate_of arm needs its reference arm)",
    )
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time, one process each (default: 2)")
    parser.add_argument("--quick", action="store_true", help="every arm and the search on a tiny budget")
    parser.add_argument(
        "--rehearsal-tokenizer",
        default=None,
        help="--quick on a real base: build the rehearsal model on this tokenizer (and its chat template) instead of "
        "the base's (a test without the real model)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument(
        "--estimate", action="store_true", help="print the study's cost at its budget's planning rates and exit"
    )
    parser.add_argument(
        "--start-only",
        action="store_true",
        help="build (or check) the study's start, the SFT model every arm trains from, and exit",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="write the report of the finished study in --out from its runs' records (no training, no sampling)",
    )
    return parser


def rehearsal_model(study, tokenizer: str | None, out: Path) -> str:
    """The --quick rehearsal's base: a tiny random model (grpo_ext.experiments.study.rehearsal) with the base's
    tokenizer pipeline and chat template (or `tokenizer`'s), retrained on the study's task text (its baselines' prompts
    too) to a small vocabulary. Kept in outputs/tiny_models/ (in the output folder when `tokenizer` is given)."""
    from grpo_ext.experiments.study.rehearsal import REHEARSAL_VOCAB, tiny_model_like
    from grpo_ext.experiments.study.runs import method_config_path, task_of
    from grpo_ext.tasks import get_task

    name, kwargs = task_of(method_config_path(study.arms[0].method, study.configs_dir))
    tasks = [get_task(name, **kwargs), *(get_task(name, **{**kwargs, **b.task_kwargs}) for b in study.baselines)]
    source = tokenizer or study.base
    path = str(tiny_model_like(source, rehearsal_folder(study, tokenizer, out), tasks=tasks))
    print(
        f"--quick: rehearsing on {path} (random weights; {Path(str(source)).name}'s tokenizer and chat template, "
        f"retrained on the task's text to <= {REHEARSAL_VOCAB} tokens)",
        flush=True,
    )
    return path


def rehearsal_folder(study, tokenizer: str | None, out: Path) -> Path:
    """Where the --quick rehearsal's base lives (`rehearsal_model` builds it there; --report-only only names it)."""
    from grpo_ext.experiments.study.rehearsal import REHEARSAL_VOCAB

    source = tokenizer or study.base
    return out / "rehearsal_model" if tokenizer else TINY_MODELS / f"{Path(str(source)).name}-{REHEARSAL_VOCAB}"


def check_values_once(study, path) -> None:
    """No search axis of the study lists one value twice (`[3.0e-4, 0.0003]` is one rate): it would be trained twice
    and counted as two settings."""
    from grpo_ext.errors import UserError

    axes = [("learning_rates", study.learning_rates)]
    axes += [(f"arms.{arm.name}.grid.{axis}", values) for arm in study.arms for axis, values in arm.grid.items()]
    for where, values in axes:
        repeated = sorted({v for v in values if list(values).count(v) > 1})
        if repeated:
            raise UserError(f"{path}: {where} repeats {repeated} (a value given twice is trained twice); each once")


def main(argv: list[str]) -> dict:
    args = build_parser().parse_args(argv)
    from grpo_ext.errors import UserError
    from grpo_ext.experiments.study.config import load_study
    from grpo_ext.experiments.study.options import StudyOptions
    from grpo_ext.experiments.study.report_only import report_only
    from grpo_ext.experiments.study.stages import run_study
    from grpo_ext.io import portable_path
    from grpo_ext.model_paths import resolve_model_path

    study = load_study(args.study)
    check_values_once(study, args.study)
    # every flag is checked before anything is built, and --estimate prices what the flags select
    if args.jobs < 1:
        raise UserError(f"--jobs: must be >= 1, got {args.jobs}")
    rehearsal = args.quick and not args.model and study.base != "embedded"
    if args.rehearsal_tokenizer and not rehearsal:
        raise UserError(
            "--rehearsal-tokenizer: only with --quick on a study whose base is not the embedded model (and no --model)"
        )
    if args.quick:
        study = study.trimmed(values_per_axis=2, seeds=2)
        # fewer problems and samples, written into the study so its report says what was scored; a validation metric
        # these samples cannot report fails here, before any training
        sizes = QUICK_REHEARSAL_EVALUATION if rehearsal else QUICK_EVALUATION
        study.validation, study.test = (replace(e, **sizes) for e in (study.validation, study.test))
    if args.arms:
        signal = study.signal
        study = study.only([a.strip() for a in args.arms.split(",") if a.strip()])
        if signal is not None and study.signal is None:
            print(f"--arms: the signal's arm {signal.arm} is not run; no learning signal measured", flush=True)
    if args.model:
        study.base = args.model
        resolve_model_path(study.base)  # a missing base model fails before any training
    if args.estimate:
        from grpo_ext.experiments.study.budget import estimate, render_estimate

        result = estimate(study)
        print(render_estimate(result))
        # the spend of a study under way, in the folder named (the default folder holds another study's runs)
        if args.out is not None and (Path(args.out, "search.json").is_file() or Path(args.out, "runs").is_dir()):
            from grpo_ext.experiments.study.spent import measured_rates, render_measured_rates, render_spent, spent

            print(f"\nMeasured in {args.out} (one core a job; see grpo_ext.experiments.study.spent):\n")
            print(render_spent(spent(study, args.out), result))
            rates = measured_rates(study, args.out)
            print("\n" + render_measured_rates(rates, estimate(study, rates), result))
        return {"estimate": result}
    args.out = args.out or "results/compare"
    # the command that reproduces the report, as a reader on another machine types it (repository-relative paths)
    command = "python scripts/run_methods.py " + shlex.join(
        portable_path(a) if a.startswith("/") else a for a in argv if a not in ("--no-progress", "--report-only")
    )
    if rehearsal:  # a rehearsal of a real study: a tiny model with its tokenizer, retrained on the task's text
        study.base = (
            str(rehearsal_folder(study, args.rehearsal_tokenizer, Path(args.out)))  # its runs' base, named only
            if args.report_only
            else rehearsal_model(study, args.rehearsal_tokenizer, Path(args.out))
        )
    # the options the runs took (--report-only checks every run's command with them: --quick's flags included)
    options = StudyOptions(
        base=study.base,
        configs=str(study.configs_dir),
        quick=args.quick,
        progress=not (args.no_progress or args.quick or args.report_only),
        quick_flags=QUICK_COMMON,
        quick_method_flags=quick_method_flags(args.quick and rehearsal),
    )
    if args.report_only:
        return report_only(study, Path(args.out), options, command)
    resolve_model_path(study.base)  # a missing base model fails before any training
    from grpo_ext.experiments.study.runs import check_arms, check_stop_support
    from grpo_ext.run_folder import OutputFolder

    if args.start_only and study.start is None:
        raise UserError(f"--start-only: {args.study} has no `start` section")
    for note in check_stop_support(study, options):  # before any run: a stop the harness cannot honour fails here
        print(note, flush=True)
    check_arms(study, args.study, options)  # every arm's run parses, before any folder is made or budget spent
    # --out: new, empty or a study's (a folder of other files is refused, never written into), one study at a time
    with OutputFolder(args.out, writer="scripts/run_methods.py", field_name="--out", adopt=is_study_folder) as folder:
        return run_study(study, args, options, folder.folder, command)


def is_study_folder(out: Path) -> bool:
    """Whether `out`, without the record of `grpo_ext.run_folder`, is a study's from before it: it holds what only a
    study writes there (its search.json, a run_methods.json, runs/, signal.json, start/, a rehearsal model)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        if {"picks", "test_seeds"} <= json.loads((out / "search.json").read_text()).keys():
            return True
    written = ("run_methods.json", "signal.json", "runs", "start", "rehearsal_model")
    return any((out / name).exists() for name in written)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from grpo_ext.cli import run_cli

    run_cli(main, sys.argv[1:])
