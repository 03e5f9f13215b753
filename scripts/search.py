"""Pick a training config's settings on the validation split, then score only the pick on test.

    python scripts/search.py --config configs/qlora.yaml --grid learning_rate=1e-4,3e-4,1e-3 \
        --grid temperature=0.7,1.0 --out results/main_job_search --test

1. Every combination of the grid is trained with `scripts/train.py --config CONFIG --<field> <value> ...` (any
   `GRPOConfig` / task / model field; `--train-args` adds the same flags to every run) into `<out>/runs/<slug>/model`.
2. Each run is scored on the validation split with the harness (`evals/passk_majk.py`: `--limit` problems, `--n`
   samples, T = `--temperature`) next to its model (`<out>/runs/<slug>/validation/`).
3. The pick is the best `--metric` on validation (ties: the earlier setting of the grid), written with every score
   to `search.json` / `search.md`. With `--test`, the pick alone is scored on the test split (`--test-limit` problems,
   `--test-n` samples), paired with the config's base model (`<out>/test/`): test numbers never exist for a setting
   that was not picked. With `--search-seed S`, every grid run trains with `--seed S` and the test scores the pick
   trained again at the config's own seed (`<out>/test_run/model`: the run the config makes with the picked
   settings), so no search run is the tested run and noise that favoured the pick on validation does not carry
   over to test.

Test is looked at once: a second test of anything else (another pick, e.g. after the grid was reordered, or the pick
retrained) is refused unless `--test-again` says so; the earlier test folder is then kept as `test.<k>/` and
search.json / search.md list every look. `--out` is a new or empty folder or an earlier search's (one search at a
time: a lock); a folder of other files is refused, and no path under it is followed out of it by a symbolic link
(`grpo_ext.run_folder.OutputFolder`). A grid setting is one folder name under `--out` (no `/`, `\\`, `..`), and
neither a grid nor `--train-args` may move a run or change the task or the base model the runs are compared on,
however its flags are spelled: they are checked on the parsed training arguments.

Resumable at any moment: a run that finished (`grpo_ext_run.json`) with the same training command
(`<out>/runs/<slug>/search_run.json`) is not trained again, an unfinished one continues from its last checkpoint
(saved every `--save-steps` steps; `resume_from_checkpoint`), and a finished report of the same harness command is
not redone. A finished run or report made by another command is refused, never reused; an unfinished run of another
command is trained again from step 0.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The training command of a run, in its folder: written before training starts, so a checkpoint found there later is
# known to be of this command. Searches before runs could resume wrote it into model/ once the run had finished.
RUN_RECORD = "search_run.json"
KEEP_CHECKPOINTS = 2  # the last one, and the one before in case the last cannot be read


def __getattr__(name: str):
    """The grid (parse_grid, settings_of, slug_of, pick, check_train_args, ...) is `grpo_ext.methods.search_grid`'s,
    imported on first use: `__main__` puts this checkout first on the import path before anything of grpo_ext loads."""
    from grpo_ext.methods import search_grid

    return getattr(search_grid, name)


def _run(argv: list[str], log: Path) -> None:
    from grpo_ext.errors import UserError

    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:  # appended: a resumed run's log follows what the stopped one wrote
        child = subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        try:
            code = child.wait()
        except BaseException:  # SIGTERM (as SystemExit, see `main`), Ctrl-C: the child stops with the search
            _stop(child)
            raise
    if code != 0:
        last = next((line for line in reversed(log.read_text().splitlines()) if line.strip()), "").strip()
        last = last.removeprefix("error: ").removesuffix(" (rerun with --debug for the traceback)")
        raise UserError(f"{argv[0]} failed (exit {code}): {last} (whole output: {log})")


def _canonical(argv: list[str] | None) -> list[str] | None:
    """A command as it acts: every argument that names a path (one that exists, or holds a separator) as its real
    path, so `--out runs/s`, `--out ./runs/s/` and `--out /abs/runs/s` make the same commands (each spelling refused
    the others' finished runs and reports as "another command")."""
    if argv is None:
        return None
    return [os.path.realpath(a) if a and not a.startswith("-") and ("/" in a or os.path.exists(a)) else a for a in argv]


def _same_command(recorded, argv: list[str]) -> bool:
    """Whether `recorded` (an argv list, or a command line "python ...") is `argv`, however its paths are spelled."""
    if isinstance(recorded, str):
        try:
            recorded = shlex.split(recorded)[1:]  # "python" first
        except ValueError:
            return False
    return isinstance(recorded, list) and _canonical(recorded) == _canonical(argv)


def _stop(child: subprocess.Popen) -> None:
    """Stop `child` (a training or harness run) and wait for it: SIGTERM, then SIGKILL after 30 s. A child left running
    kept training into the search's folder, and the rerun failed on its log line."""
    if child.poll() is None:
        child.terminate()
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()


def _read_json(path: Path) -> dict | None:
    """A JSON object the search (or the harness) wrote, None when the file is not there; junk is named."""
    from grpo_ext.errors import UserError

    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text())
    except ValueError as err:
        raise UserError(f"{path}: not valid JSON ({err}); remove it or use another --out") from None
    if not isinstance(value, dict):
        raise UserError(f"{path}: expected a JSON object; remove it or use another --out")
    return value


def _recorded(folder: Path) -> list[str] | None:
    """The training command recorded for the run in ``folder`` (see `RUN_RECORD`), or None."""
    for path in (folder / RUN_RECORD, folder / "model" / RUN_RECORD):
        record = _read_json(path)
        if record is not None:
            return record.get("train")
    return None


def _train(train: list[str], folder: Path, save_steps: int) -> None:
    """Train into ``folder / "model"`` unless a finished run of exactly this command is there; an unfinished run of
    this command continues from its last checkpoint. Whether a run finished, whether a checkpoint can be resumed
    and who may write into the folder are scripts/train.py's rules (`grpo_ext.checkpoints`, `grpo_ext.run_folder`)."""
    from grpo_ext.checkpoints import last_checkpoint, read_run_status
    from grpo_ext.errors import UserError
    from grpo_ext.io import atomic_write_json

    model, made = folder / "model", _recorded(folder)
    status = read_run_status(model)
    if (status or {}).get("status") == "complete":
        if not _same_command(made, train):
            raise UserError(
                f"{model}: trained by {made or 'another command'}, not by {train}: remove it or use another --out"
            )
        return
    shutil.rmtree(folder / "validation", ignore_errors=True)  # scores of an earlier model in this folder
    checkpoint = last_checkpoint(model) if made is not None and _same_command(made, train) else None
    if checkpoint:
        again = ["--resume_from_checkpoint", checkpoint]
        print(f"training {folder.name} (resumed from {Path(checkpoint).name})", flush=True)
    else:  # nothing to continue: an unfinished run of this search's own folder starts again (train.py clears it)
        again = ["--overwrite_output_dir", "true"] if status is not None else []
        print(f"training {folder.name}", flush=True)
    atomic_write_json(folder / RUN_RECORD, {"train": train})
    saving = ["--save_strategy", "steps", "--save_steps", str(save_steps), "--save_total_limit", str(KEEP_CHECKPOINTS)]
    _run([*train, *saving, *again], folder / "train.log")


def _report(folder: Path) -> dict | None:
    report = _read_json(folder / "report.json")
    return report if report is not None and report.get("complete") else None


def _harness_argv(models: list[str], split: str, args, out: Path) -> list[str]:
    """The harness command that scores ``models`` on ``split`` into ``out`` (test: ``--test-limit`` problems x
    ``--test-n`` samples; validation: ``--limit`` x ``--n``)."""
    argv = ["evals/passk_majk.py", *(a for m in models for a in ("--model", m)), "--task-kwargs", args.task_kwargs]
    limit, n = (args.test_limit, args.test_n) if split == "test" else (args.limit, args.n)
    argv += ["--task", args.task, "--split", split, "--n", str(n), "--temperature", str(args.temperature)]
    return [*argv, "--limit", str(limit), "--no-progress", "--out", str(out)]


def _check_harness_argv(argv: list[str]) -> None:
    """What the harness would refuse (the task and its knobs, n, temperature), refused before any training."""
    from grpo_ext.evaluation.cli import harness_settings
    from grpo_ext.evaluation.passk_majk import build_parser

    harness_settings(build_parser().parse_args(argv[1:]))


def _evaluate(models: list[str], split: str, args, out: Path) -> dict:
    """The harness's report of ``models`` on ``split`` in ``out``: read when it exists and was made by the same command
    from the same models, made when there is none, scored again when its models changed since (retrained in place);
    a report of another command is refused."""
    from grpo_ext.errors import UserError

    argv = _harness_argv(models, split, args, out)
    command = "python " + shlex.join(argv)  # what the harness records as its command
    report = _report(out)
    if report is not None and not _same_command(report.get("command"), argv):  # another pick is not "changed"
        raise UserError(
            f"{out / 'report.json'}: made by `{report.get('command')}`, not by `{command}` (another pick, split or "
            "evaluation setting): remove it or use another --out"
        )
    if report is not None and _stale(report, models):
        print(f"{out}: its models changed since it was made (or how the harness loads them): scored again", flush=True)
        report = None
    if report is None:
        _run(argv, out.parent / f"{out.name}.log")
        report = _report(out)
        if report is None:
            raise UserError(f"{out / 'report.json'}: the harness exited without a complete report")
    return report


def _fingerprints(models: list[str]) -> list[str]:
    from grpo_ext.evaluation.backends import load_fingerprint

    return [load_fingerprint(model) for model in models]


def _stale(report: dict, models: list[str]) -> bool:
    """Whether a report's models are not the ones the harness would load now (retrained, or an adapter's base now
    loaded as it was trained): their fingerprints differ."""
    return [m.get("model_fingerprint") for m in report.get("models", [])] != _fingerprints(models)


def _score(report: dict, metric: str, model: int = 0) -> float:
    from grpo_ext.evaluation.results import EvalResult

    return EvalResult.of(report["models"][model]).value(metric)


def test_looks(owner, previous: dict | None) -> list[dict]:
    """Every earlier look at test from this `--out` (`owner`: its `OutputFolder`; command, fingerprints of the models,
    scores): search.json's ledger, or for a search from before the ledger, its test report."""
    if previous is not None and isinstance(previous.get("test_looks"), list):
        return previous["test_looks"]
    report = _read_json(owner.path("test", "report.json"))
    if report is None:
        return []
    models = report.get("models") if isinstance(report.get("models"), list) else []  # a killed test: maybe none yet
    return [{"command": report.get("command"), "fingerprints": [m.get("model_fingerprint") for m in models]}]


def _look(models: list[str], args, owner, looks: list[dict]) -> tuple[dict, int | None]:
    """This look at test (``models``: base, pick) and the index of the same earlier look (same command, however its
    paths are spelled, same weights), or None for a new one; a new look after one is refused unless --test-again.
    Decided before search.json is written: a refused look leaves the search's record, search.md and test/ as they
    were (search.json was rewritten with the new pick and no test while search.md and test/ said otherwise)."""
    from grpo_ext.errors import UserError

    folder = owner.path("test")
    argv = _harness_argv(models, "test", args, folder)
    look = {"command": "python " + shlex.join(argv), "fingerprints": _fingerprints(models)}
    known = next(
        (
            i
            for i, seen in enumerate(looks)
            if _same_command(seen.get("command"), argv) and seen.get("fingerprints") == look["fingerprints"]
        ),
        None,
    )
    if known is None and looks and not args.test_again:
        raise UserError(
            f"--test: {folder} already scored another model or setting on test ({looks[-1].get('command')}); "
            "scoring this pick too would look at test twice: pass --test-again to do it on purpose (search.json and "
            "search.md then list every look)"
        )
    return look, known


def _test(models: list[str], args, owner, looks: list[dict], seen: tuple[dict, int | None]) -> tuple[dict, list[dict]]:
    """The test report of ``models`` (base, pick) and the ledger of looks at test with this one (`_look`'s `seen`).
    The same look is read back or resumed; a new one keeps the earlier test folder aside (``test.<k>``), never
    replaced."""
    folder = owner.path("test")
    look, known = seen
    if known is None:
        report = _read_json(folder / "report.json")
        if report is not None:  # another look's report: kept aside, never replaced
            k = next(k for k in itertools.count(1) if not owner.path(f"test.{k}").exists())
            folder.rename(owner.path(f"test.{k}"))
            if owner.path("test.log").is_file():
                owner.path("test.log").rename(owner.path(f"test.{k}.log"))
        looks = [*looks, look]
    report = _evaluate(models, "test", args, folder)
    i = len(looks) - 1 if known is None else known
    looks[i] = {**looks[i], "base": _score(report, "pass@1", 0), "pick": _score(report, "pass@1", 1)}
    looks[i]["model"] = models[1]
    return report, looks


def main(argv: list[str]) -> dict:
    from grpo_ext.errors import UserError, read_yaml
    from grpo_ext.methods.search_grid import check_settings, check_train_args, is_search_folder, parse_grid
    from grpo_ext.run_folder import OutputFolder
    from grpo_ext.run_record import sigterm_as_exit

    args = _parse_args(argv)
    grid = parse_grid(args.grid)
    train_args = check_train_args(args.train_args)
    config = read_yaml(args.config, "--config") or {}
    if not isinstance(config, dict):
        raise UserError(f"--config: {args.config} is not a mapping of training fields")
    args.task = str(config.get("task", "arithmetic"))
    args.task_kwargs = json.dumps(config.get("task_kwargs") or {})
    base = str(config.get("model_name_or_path", "embedded"))
    out = Path(args.out)
    seeding = []
    if args.search_seed is not None:
        if args.search_seed == config.get("seed", 42):  # 42: TrainingArguments' default seed
            raise UserError(f"--search-seed {args.search_seed}: it is the config's seed, the one the test run uses")
        seeding = ["--seed", str(args.search_seed)]
    for split in ("validation", "test") if args.test else ("validation",):  # before any training
        _check_harness_argv(_harness_argv([base], split, args, out / split))
    check_settings(args.config, grid, train_args, seeding)  # the protected fields, on the parsed arguments
    with (
        sigterm_as_exit(),  # SIGTERM as SystemExit(143): the running child is stopped (`_run`), the lock released
        OutputFolder(out, writer="scripts/search.py", field_name="--out", adopt=is_search_folder) as folder,
    ):
        return _search(args, grid, train_args, seeding, config, base, folder)


def _parse_args(argv: list[str]) -> argparse.Namespace:
    from grpo_ext.errors import UserError
    from grpo_ext.evaluation.cli import HarnessArgumentParser  # a bad flag is one line, exit 2
    from grpo_ext.evaluation.registry import default_ks

    parser = HarnessArgumentParser(prog="search.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="the training YAML (scripts/train.py's --config)")
    parser.add_argument("--grid", action="append", default=[], help="FIELD=V1,V2,...; repeat for more axes")
    parser.add_argument("--out", required=True, help="folder of the runs, search.json / search.md and test/")
    parser.add_argument("--train-args", default="", help="flags added to every training run, e.g. '--max_steps 50'")
    parser.add_argument("--metric", default="pass@1", help="validation metric that picks (pass@k or maj@k)")
    parser.add_argument("--limit", type=int, default=200, help="validation problems (default: 200)")
    parser.add_argument("--n", type=int, default=16, help="samples per validation problem (default: 16)")
    parser.add_argument("--test-limit", type=int, help="test problems with --test (default: --limit)")
    parser.add_argument("--test-n", type=int, default=64, help="samples per test problem (default: 64)")
    parser.add_argument("--save-steps", type=int, default=5, help="checkpoint every N training steps (default: 5)")
    parser.add_argument("--temperature", type=float, default=0.7, help="evaluation temperature (default: 0.7)")
    parser.add_argument("--test", action="store_true", help="then score the pick (and the base) on the test split")
    parser.add_argument(
        "--test-again",
        action="store_true",
        help="with --test: score on test although this --out already looked at test with another pick or model "
        "(recorded in search.json and search.md)",
    )
    parser.add_argument(
        "--search-seed",
        type=int,
        help="train the grid at this seed; --test then trains the pick again at the config's seed and scores that",
    )
    args = parser.parse_args(argv)
    args.argv = argv
    args.test_limit = args.test_limit if args.test_limit is not None else args.limit
    for flag in ("save_steps", "limit", "n", "test_limit", "test_n"):
        if getattr(args, flag) < 1:
            raise UserError(f"--{flag.replace('_', '-')}: expected a number >= 1, got {getattr(args, flag)}")
    if args.test_again and not args.test:
        raise UserError("--test-again: only with --test")
    metric_name, _, metric_k = args.metric.partition("@")
    ks = default_ks(args.n)  # the ks the harness reports by default
    if metric_name not in ("pass", "maj") or not metric_k.isdigit() or int(metric_k) not in ks:
        raise UserError(f"--metric: expected pass@k or maj@k with k one of {ks} (--n {args.n}), got {args.metric!r}")
    return args


def _search(args, grid, train_args, seeding, config, base, owner) -> dict:
    """The search in the folder `owner` holds: every path under it comes from `owner.path`, which never follows a
    symbolic link out of it (a `runs/<slug>` linked elsewhere would have its validation/ deleted)."""
    from grpo_ext.io import atomic_write_json, atomic_write_text
    from grpo_ext.methods.search_grid import pick, settings_of, slug_of

    out = owner.folder

    previous = _read_json(owner.path("search.json"))
    looks = test_looks(owner, previous)
    settings = settings_of(grid)
    scores, reports = {}, {}
    for i, setting in enumerate(settings, 1):
        slug = slug_of(setting)
        folder = owner.path("runs", slug)
        for name in ("model", "validation"):  # trained into, and deleted when the run trains again: never via a link
            owner.path("runs", slug, name)
        flags = [a for name, value in setting.items() for a in (f"--{name}", value)]
        train = ["scripts/train.py", "--config", args.config, "--output_dir", str(folder / "model")]
        _train([*train, *train_args, *seeding, *flags, "--disable_tqdm", "true"], folder, args.save_steps)
        print(f"[{i}/{len(settings)}] validation {slug}", flush=True)
        reports[slug] = _evaluate([str(folder / "model")], "validation", args, folder / "validation")
        scores[slug] = _score(reports[slug], args.metric)
    base_report = _evaluate([base], "validation", args, owner.path("base_validation"))
    chosen = pick(settings, scores)
    record = {
        "command": "python scripts/search.py " + " ".join(args.argv),
        "config": args.config,
        "base": base,
        "grid": grid,
        "search_seed": args.search_seed,
        "validation": {"limit": args.limit, "n": args.n, "temperature": args.temperature, "metric": args.metric},
        "base_score": _score(base_report, args.metric),
        "scores": scores,
        "pass@n": {slug: _score(r, f"pass@{args.n}") for slug, r in reports.items()},
        "pick": {"slug": slug_of(chosen), **chosen},
        "test_looks": looks,  # every look at test from this --out, kept across runs
    }
    if args.test:  # the pick's test run trained, and this look at test allowed, before the record is rewritten
        folder = owner.path("runs", record["pick"]["slug"], "model")
        if seeding:  # the pick at the config's own seed: a run the search never scored
            flags = [a for name, value in chosen.items() for a in (f"--{name}", value)]
            folder = owner.path("test_run", "model")
            train = ["scripts/train.py", "--config", args.config, "--output_dir", str(folder)]
            print("training the pick at the config's seed (test run)", flush=True)
            _train([*train, *train_args, *flags, "--disable_tqdm", "true"], owner.path("test_run"), args.save_steps)
        tested = [base, str(folder)]
        seen = _look(tested, args, owner, looks)
    atomic_write_json(owner.path("search.json"), record)  # written before any test number exists
    lines = [
        f"# Search of `{args.config}` on validation",
        "",
        f"{args.limit} validation problems, n = {args.n}, T = {args.temperature}; pick: the best {args.metric}.",
        "",
        f"| setting | {args.metric} | pass@{args.n} |",
        "|---|---:|---:|",
        f"| base (`{base}`) | {record['base_score']:.3f} | {_score(base_report, f'pass@{args.n}'):.3f} |",
    ]
    for slug, score in scores.items():
        mark = " **(pick)**" if slug == record["pick"]["slug"] else ""
        lines.append(f"| {slug}{mark} | {score:.3f} | {record['pass@n'][slug]:.3f} |")
    if args.test:
        test, looks = _test(tested, args, owner, looks, seen)
        where = f"{args.test_limit} test problems, n = {args.test_n}"
        if seeding:
            where += f"; the pick trained again at the config's seed {config.get('seed', 42)}, not the search's"
        lines += ["", f"Test of the pick against the base ({where}): `{out / 'test' / 'report.md'}`."]
        if len(looks) > 1:  # said where the numbers are read, not only in the JSON
            lines += ["", f"**Test was looked at {len(looks)} times from this folder** (--test-again); earlier looks:"]
            lines += [f"- `{look.get('model', '?')}`: pick pass@1 {look.get('pick', '?')}" for look in looks[:-1]]
        record["test"] = {"base": _score(test, "pass@1", 0), "pick": _score(test, "pass@1", 1), "model": str(folder)}
        record["test_looks"] = looks
        atomic_write_json(owner.path("search.json"), record)
    atomic_write_text(owner.path("search.md"), "\n".join(lines) + "\n")
    print(f"pick: {record['pick']['slug']} ({args.metric} {scores[record['pick']['slug']]:.3f} on validation)")
    return record


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    from grpo_ext.cli import run_cli

    run_cli(main, sys.argv[1:])
