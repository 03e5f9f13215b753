"""The harness command's library half (``python evals/passk_majk.py``): its parser and its run, so that scripts
(``scripts/search.py``, ``scripts/real_result.py``, ``scripts/gpu_check.py``) parse and run a harness command through
the library; ``evals/passk_majk.py`` is the command line around it, as ``evals/compare.py`` is around
:mod:`grpo_ext.experiments.compare.cli`."""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import shlex
from pathlib import Path

from grpo_ext.errors import UserError, user_input
from grpo_ext.evaluation.cli import (
    CACHE_NAME,
    HarnessArgumentParser,
    add_harness_arguments,
    add_report_arguments,
    harness_settings,
    report_settings,
)

__all__ = ["HARNESS_WRITER", "build_parser", "is_harness_folder", "main"]

#: How the harness's output folders name their writer (`grpo_ext.run_folder.FOLDER_RECORD`).
HARNESS_WRITER = "evals/passk_majk.py"


def _harness_files() -> tuple[str, ...]:
    """Every name the harness writes in its --out (the reports and the sample cache)."""
    from grpo_ext.evaluation.excerpt import EXCERPT_NAME
    from grpo_ext.evaluation.report import REPORT_JSON, REPORT_MD, REPORT_PNG, SCATTER_PNG

    return (REPORT_MD, REPORT_JSON, REPORT_PNG, SCATTER_PNG, EXCERPT_NAME, CACHE_NAME)


def is_harness_folder(folder: Path) -> bool:
    """Whether `folder`, from before the harness recorded its folders, is one it wrote: only names the harness writes,
    and a report.json of a harness command or a sample cache whose first line is a sample record. A folder of a
    user's own report.md or samples.jsonl is not (the harness would overwrite the one and append to the other)."""
    from grpo_ext.evaluation.cache import RECORD_FIELDS

    # hidden names are the lock's and unfinished atomic writes' (a user's hidden file is never one the harness writes)
    if not {p.name for p in folder.iterdir() if not p.name.startswith(".")} <= set(_harness_files()):
        return False
    with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
        if str(json.loads((folder / "report.json").read_text()).get("command", "")).startswith("python evals/"):
            return True
    with contextlib.suppress(OSError, ValueError, TypeError), (folder / CACHE_NAME).open("rb") as handle:
        first = handle.readline()
        return first.endswith(b"\n") and set(RECORD_FIELDS) <= json.loads(first).keys()
    return False


def build_parser() -> HarnessArgumentParser:
    parser = HarnessArgumentParser(
        prog="passk_majk.py",
        description="Pass@K vs Maj@K of one or more models on a verifiable task (report.md, report.json, "
        "passk_majk.png and a resumable sample cache in --out).",
    )
    parser.add_argument(
        "--model",
        action="append",
        default=None,
        metavar="PATH",
        help="model folder, PEFT adapter folder, 'embedded' or hub id; repeat to compare: the first is A (e.g. the "
        "base), each later one a B (e.g. an RL model) compared with it (default: embedded)",
    )
    add_harness_arguments(parser)
    add_report_arguments(parser)
    parser.add_argument("--trust-remote-code", action="store_true", help="allow model code from the model folder")
    parser.add_argument(
        "--adapter-base",
        choices=("as_trained", "full_precision"),
        default="as_trained",
        help="how a PEFT adapter's base is loaded (transformers backend): as_trained (default) quantises it as the "
        "adapter's run recorded (a QLoRA adapter on its 4-bit base), full_precision merges every adapter into the "
        "unquantised base",
    )
    parser.add_argument(
        "--allow-unfinished",
        action="store_true",
        help="score a model folder whose training run did not finish (grpo_ext_run.json: running or failed); the "
        "report carries a warning saying so (default: refused)",
    )
    parser.add_argument(
        "--out", default="outputs/passk_majk", metavar="DIR", help="output folder (default: outputs/passk_majk)"
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def main(argv: list[str]) -> dict:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    # Everything the user typed is checked before any model is loaded or any sample drawn.
    from grpo_ext.evaluation.backends import vllm_available
    from grpo_ext.evaluation.harness import load_problems
    from grpo_ext.evaluation.models_given import check_models
    from grpo_ext.run_folder import OutputFolder

    settings = harness_settings(args)
    report = report_settings(args)
    if args.backend == "vllm" and not vllm_available():
        raise UserError("--backend vllm: vllm is not installed here (use --backend transformers)")
    with user_input(None):  # the user's dataset: a missing or empty file, a bad row
        problems = load_problems(settings.task, settings.split, settings.limit)
    models = args.model or ["embedded"]
    # a missing folder, one model under two paths, an unfinished run: refused before the first model is loaded
    unfinished = check_models(models, allow_unfinished=args.allow_unfinished)

    # --out: a new folder, or one the harness wrote (a folder of a user's report.md or samples.jsonl is refused), held
    # for the run; every file it writes there is checked not to lead out of it (a linked samples.jsonl)
    with OutputFolder(args.out, writer=HARNESS_WRITER, field_name="--out", adopt=is_harness_folder) as folder:
        for name in _harness_files():
            folder.path(name)
        return _run(args, argv, settings, report, problems, models, unfinished, folder.folder)


def _run(args, argv, settings, report, problems, models, unfinished, out: Path) -> dict:
    """Sample (or read back from the cache) every model, then write the reports into `out`, held by `main`."""
    from grpo_ext.evaluation.backends import load_backend
    from grpo_ext.evaluation.harness import check_problems_fit, check_stops_writable, evaluate_model
    from grpo_ext.evaluation.registry import MAJ_AT_K, PASS_AT_K
    from grpo_ext.evaluation.report import crossover_text, read_comparisons, write_reports
    from grpo_ext.io import portable_path

    results = []
    for model in models:
        backend = load_backend(
            model, args.backend, trust_remote_code=args.trust_remote_code, adapter_base=args.adapter_base
        )
        check_problems_fit(backend, problems, settings.params.max_new_tokens, f"--model {model}")
        check_stops_writable(backend, settings.params.stop, f"--model {model}")
        result = evaluate_model(
            backend,
            settings.task,
            settings.params,
            settings.ks,
            out / CACHE_NAME,
            problems=problems,
            task_id=settings.task_id,
            split=settings.split,
            progress=not args.no_progress,
            taus=report.taus,
        )
        if model in unfinished:  # --allow-unfinished: said in the report too
            result["warnings"].append(unfinished[model])
        results.append(result)
        del backend  # one model in memory at a time
        gc.collect()
    command = "python evals/passk_majk.py " + shlex.join(argv)
    paths = write_reports(
        results,
        out,
        command=command.strip(),
        extra={"cache": portable_path(out / CACHE_NAME)},
        bootstrap=report.bootstrap,
        solved_threshold=report.solved_threshold,
        by=settings.by,
    )

    for r in results:
        cells = "  ".join(
            f"k={k}: pass {r[PASS_AT_K.name][str(k)]:.3f} maj {r[MAJ_AT_K.name][str(k)]:.3f}" for k in r["ks"]
        )
        print(f"{r['model']}: mean accuracy {r['mean_accuracy']:.3f}  {cells}")
    for c in read_comparisons(paths["json"]):
        k = str(c["ks"][-1])
        o = c["solved_overlap"][k]
        print(
            f"{c['b']} (B) vs {c['a']} (A): at k={k} solved by both {o['both']}, only A {o['only_a']}, only B "
            f"{o['only_b']}, neither {o['neither']}; crossover: {crossover_text(c['crossover'], c['n'])}"
        )
    print("wrote " + ", ".join(str(p) for p in (*paths.values(), out / CACHE_NAME)))
    return {"results": results, "paths": paths}
