"""The fair comparison: every arm searched on validation, its pick trained with every seed and scored on test.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 python scripts/run_methods.py --study configs/compare.yaml --out results/compare
    python scripts/run_methods.py --study configs/compare.yaml --quick --out outputs/compare_quick   # minutes

1. Search: every (arm, setting) of the study is trained with the search seed (`python -m grpo_ext.methods`, in a
   worker process; `--jobs` at a time) and scored on the validation split (validation.json in the run folder).
2. Picks: each arm's best setting on validation (search.json: the grid, every score, the picks). Test numbers are
   never computed for a setting that was not picked, so they cannot enter a pick.
3. The picks are trained with the other seeds and every picked run, and the base, is scored on test (test.json).
4. The report (report.md, report.json, plots) from those test results.

Resumable: a run folder holding training_cost.json is never trained again, and evaluations resume from their sample
caches, so an interrupted command (or one spread over several sittings) picks up where it stopped.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# --quick: 2 optimizer steps on 8 train prompts, budgets equal (32 samples), a tiny evaluation.
QUICK_COMMON = "--max_steps 2 --train_size 8 --warmup_steps 0 --logging_steps 1 --curve_every 1 --curve_prompts 4"
QUICK = {
    "sft": "--per_device_train_batch_size 16 --sample_budget 0",
    "rft": "--per_device_train_batch_size 16 --samples_per_prompt 4 --sample_max_new_tokens 32 --sample_budget 32",
    "dpo": "--per_device_train_batch_size 8 --samples_per_prompt 4 --sample_max_new_tokens 32 --sample_budget 32",
    "online": "--per_device_train_batch_size 16 --num_generations 4 --max_completion_length 32 "
    "--sample_max_new_tokens 32 --sample_budget 32 --curve_n 2",
}
QUICK_EVALUATION = {"limit": 6, "n": 4, "max_new_tokens": 32}


def build_parser() -> argparse.ArgumentParser:
    from grpo_ext.evaluation.cli import HarnessArgumentParser

    parser = HarnessArgumentParser(prog="run_methods.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", default=str(ROOT / "configs" / "compare.yaml"), help="the study (YAML)")
    parser.add_argument("--out", default="results/compare", help="output folder (default: results/compare)")
    parser.add_argument("--model", default=None, help="the base every arm starts from (default: the study's)")
    parser.add_argument("--arms", default=None, help="comma-separated arms to run (default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time, one process each (default: 2)")
    parser.add_argument("--quick", action="store_true", help="every arm and the search on a tiny budget")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser


def main(argv: list[str]) -> dict:
    args = build_parser().parse_args(argv)
    from grpo_ext.errors import UserError
    from grpo_ext.io import atomic_write_json, portable_path
    from grpo_ext.methods.study.config import load_study, pick_settings
    from grpo_ext.methods.study.runs import Job, read_score, run_jobs
    from grpo_ext.models import resolve_model_path

    study = load_study(args.study)
    if args.quick:
        study = study.trimmed(values_per_axis=2, seeds=2)
        study.validation.check_metric(QUICK_EVALUATION["n"])  # --quick scores fewer samples: before any training
    if args.model:
        study.base = args.model
    if args.arms:
        keep = [a.strip() for a in args.arms.split(",") if a.strip()]
        study.arms = [study.arm(name) for name in keep]
    if args.jobs < 1:
        raise UserError(f"--jobs: must be >= 1, got {args.jobs}")
    resolve_model_path(study.base)  # a missing base model fails before any training
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    options = {
        "base": study.base,
        "configs": str(ROOT / study.configs) if not Path(study.configs).is_absolute() else study.configs,
        "quick": args.quick,
        "progress": not (args.no_progress or args.quick),
        "quick_flags": QUICK_COMMON,
        "quick_method_flags": QUICK,
        "quick_evaluation": QUICK_EVALUATION,
    }
    start = time.perf_counter()

    search = [Job(arm, setting, seed, study.validation) for arm, setting, seed in study.search()]
    # The base is scored on validation too: a pick is only worth its test runs if it beats the base there.
    base_validation = Job(None, None, None, study.validation)
    run_jobs([base_validation, *search], out, study, options, args.jobs)
    scores = {arm.name: {} for arm in study.arms}
    for job in search:
        scores[job.arm.name][job.setting.slug] = read_score(job, out, study)
    grids = {arm.name: arm.settings(study.learning_rates) for arm in study.arms}
    picks = pick_settings(scores, grids)
    atomic_write_json(
        out / "search.json",
        {
            "validation": vars(study.validation),
            "search_seed": study.search_seed,
            "base": read_score(base_validation, out, study),
            "grid": {name: [s.as_dict() for s in grid] for name, grid in grids.items()},
            "scores": scores,
            "picks": {name: {"slug": s.slug, **s.as_dict()} for name, s in picks.items()},
        },
    )
    search_done = time.perf_counter()

    final = [Job(arm, picks[arm.name], seed, study.test) for arm in study.arms for seed in study.seeds]
    run_jobs([Job(None, None, None, study.test), *final], out, study, options, args.jobs)
    trained = time.perf_counter()

    from grpo_ext.methods.study.report import write_study_report

    paths = write_study_report(study, out, picks, options)
    end = time.perf_counter()
    record = {
        "command": "python scripts/run_methods.py " + " ".join(argv),
        "study": portable_path(args.study),
        "quick": args.quick,
        "search_seconds": round(search_done - start, 1),
        "final_seconds": round(trained - search_done, 1),
        "report_seconds": round(end - trained, 1),
        "total_seconds": round(end - start, 1),
    }
    # A resumed study runs in several sittings: each appends its own timings (a sitting that only rewrote the report
    # must not replace the record of the one that trained everything).
    previous = out / "run_methods.json"
    sittings = json.loads(previous.read_text()).get("sittings", []) if previous.is_file() else []
    atomic_write_json(previous, {**record, "sittings": [*sittings, record]})
    print(f"total {record['total_seconds']} s; report: {paths['md']}")
    return {"picks": picks, "scores": scores, "paths": paths, "record": record}


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from grpo_ext.cli import run_cli

    run_cli(main, sys.argv[1:])
