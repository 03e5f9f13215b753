"""An evaluation report checked before its numbers go into a model card (scripts/publish.py --eval-report).

A card states that *this* checkpoint scored these numbers, so a report is taken only when:
- it is of this checkpoint: its recorded model fingerprint (every byte of the weights, tokenizer and config, an
  adapter's base too; `grpo_ext.evaluation.backends.load_fingerprint`) is the checkpoint's as the harness loads it,
  its adapter's base quantised as trained or in full precision. A report of another model (the base's report put
  into an adapter's card) or one without a fingerprint cannot vouch for it;
- its numbers are possible: every pass@k and maj@k in [0, 1], pass@k non-decreasing in k (more samples never
  solve fewer problems; so pass@1 <= pass@k), maj@k <= pass@k at the same k (a majority that is right needs a right
  sample), at least one problem scored (`n_problems`) and a sampling temperature >= 0. maj@k may fall as k grows and
  may exceed pass@k at another k: it is not checked against them;
- its numbers are its samples': where it keeps its per-problem records (the harness does), `n_problems` is their
  count and every pass@k and maj@k their mean, so a headline edited by hand never reaches the card;
- it is a report: `--eval-report` naming a folder without `report.json` (a study's run folder) is one line naming
  the results to give instead (its `test.json`);
- its strings are plain: `task_id` and the other names are one line without markdown code delimiters (the card
  escapes what it prints anyway, `grpo_ext.hub.card`).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from grpo_ext.errors import UserError, user_input
from grpo_ext.evaluation.registry import MAJ_AT_K, PASS_AT_K, headline_entries
from grpo_ext.evaluation.report import metric_table, read_report

__all__ = ["read_checked_report"]


def read_checked_report(path: str | os.PathLike, model: str | None, checkpoint: Path) -> dict:
    """The result of `checkpoint` in the report at `path` (`model` picks one of several), checked as the module says;
    a `UserError` naming `--eval-report` and what is wrong."""
    _check_is_a_report(Path(path))
    with user_input("--eval-report"):  # a report that is not the harness's: one line naming the file
        report = read_report(path, model)
    where = f"--eval-report: {path}"
    _check_fingerprint(report, checkpoint, where)
    _check_numbers(report, where)
    _check_records(report, where)
    return report


def _check_is_a_report(path: Path) -> None:
    """A folder given as the report holds the harness's `report.json`; a run folder of a study (its `test.json`,
    `validation.json`: one result each) is named with the files to give instead."""
    if not path.is_dir() or (path / "report.json").is_file():
        return
    results = sorted(p.name for p in path.glob("*.json") if p.stem in ("test", "validation"))
    hint = f": give one of its results, e.g. {path / results[0]}" if results else ""
    raise UserError(f"--eval-report: {path} holds no report.json; pass the harness's output folder or a result{hint}")


def _check_fingerprint(report: dict, checkpoint: Path, where: str) -> None:
    from grpo_ext.evaluation.backends import ADAPTER_BASES, load_fingerprint

    recorded = report.get("model_fingerprint")
    name = report.get("model")
    if not isinstance(recorded, str) or not recorded:
        raise UserError(
            f"{where}: the result of {name!r} records no model fingerprint, so it cannot be checked to be of "
            f"{checkpoint}: score the checkpoint itself with evals/passk_majk.py --model {checkpoint}"
        )
    with user_input("CHECKPOINT"):
        loads = {load_fingerprint(str(checkpoint), adapter_base=base) for base in ADAPTER_BASES}
    if recorded not in loads:
        raise UserError(
            f"{where}: the result is of another model ({name!r}, fingerprint {recorded}) than {checkpoint} "
            f"({' or '.join(sorted(f for f in loads if f))}): its numbers would describe another model"
        )


def _check_numbers(report: dict, where: str) -> None:
    pass_at = metric_table(report, PASS_AT_K.name, where)
    for metric in headline_entries():  # pass@k, maj@k
        table = pass_at if metric is PASS_AT_K else metric_table(report, metric.name, where)
        outside = {k: v for k, v in table.items() if not 0.0 <= v <= 1.0 or k < 1}
        if outside:
            k, value = next(iter(outside.items()))
            raise UserError(f"{where}: {metric.at(k)} is {value}, outside [0, 1] (or k < 1)")
    ks = list(pass_at)
    for small, large in zip(ks, ks[1:], strict=False):
        if pass_at[large] < pass_at[small] - 1e-9:  # the unbiased estimator is non-decreasing in k, up to rounding
            raise UserError(
                f"{where}: {PASS_AT_K.at(small)} = {pass_at[small]} > {PASS_AT_K.at(large)} = {pass_at[large]}; "
                f"{PASS_AT_K.name} cannot fall as k grows (more samples never solve fewer problems): not a report of "
                "the harness"
            )
    majority = metric_table(report, MAJ_AT_K.name, where)
    above = [k for k in majority if k in pass_at and majority[k] > pass_at[k] + 1e-9]
    if above:  # per problem, the majority answer is right in a k-subset only if some sample of it is
        k = above[0]
        raise UserError(
            f"{where}: {MAJ_AT_K.at(k)} = {majority[k]} > {PASS_AT_K.at(k)} = {pass_at[k]}; a majority of k samples "
            "is right only where one of them is: not a report of the harness"
        )
    n = report.get("n")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1 or (ks and ks[-1] > n):
        raise UserError(f"{where}: n = {n!r} is not a number of samples >= every k ({ks})")
    problems = report.get("n_problems")
    if isinstance(problems, bool) or not isinstance(problems, int) or problems < 1:
        raise UserError(f"{where}: n_problems = {problems!r}: a report of no problem scores nothing")
    params = report.get("params")
    temperature = params.get("temperature") if isinstance(params, dict) else None
    if temperature is not None and (
        isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature < 1e6
    ):
        raise UserError(f"{where}: params.temperature = {temperature!r} is not a sampling temperature >= 0")


def _check_records(report: dict, where: str) -> None:
    """The headline numbers are what the result's own per-problem records say (where it keeps them, as the harness
    does): as many records as `n_problems`, pass@k the mean of the unbiased estimator over them, maj@k the mean of
    their maj@k. A headline edited by hand (or a report stitched together) would put on the card numbers no sample
    behind it gave."""
    from grpo_ext.evaluation.metrics import pass_at_k

    records = report.get("per_problem")
    if not isinstance(records, list) or not records:
        return  # a result written without its records: nothing to hold the headline against
    if report.get("n_problems") != len(records):
        raise UserError(
            f"{where}: n_problems = {report.get('n_problems')!r}, but it holds {len(records)} per-problem records: "
            "not what the harness wrote"
        )
    n = report["n"]  # checked by _check_numbers
    try:
        for k, value in metric_table(report, PASS_AT_K.name, where).items():
            mean = sum(pass_at_k(int(r.get("n", n)), int(r["n_correct"]), int(k)) for r in records) / len(records)
            _agrees(PASS_AT_K.at(k), value, mean, where)
        for k, value in metric_table(report, MAJ_AT_K.name, where).items():
            values = [r.get(MAJ_AT_K.name, {}).get(str(k)) for r in records]
            if any(not isinstance(v, (int, float)) or isinstance(v, bool) for v in values):
                continue  # per-problem maj@k not kept at this k: nothing to hold it against
            _agrees(MAJ_AT_K.at(k), value, sum(values) / len(values), where)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        what = f"{type(err).__name__}: {err}"
        raise UserError(f"{where}: its per-problem records are not the harness's ({what})") from None


def _agrees(name: str, value: float, records: float, where: str) -> None:
    if not math.isclose(value, records, rel_tol=1e-6, abs_tol=1e-6):
        raise UserError(
            f"{where}: {name} = {value}, but its per-problem records give {records:.6g}: the headline is not what the "
            "samples scored (edited, or another evaluation's)"
        )
