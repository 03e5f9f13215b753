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
- its strings are plain: `task_id` and the other names are one line without markdown code delimiters (the card
  escapes what it prints anyway, `grpo_ext.hub.card`).
"""

from __future__ import annotations

import os
from pathlib import Path

from grpo_ext.errors import UserError, user_input
from grpo_ext.evaluation.registry import MAJ_AT_K, PASS_AT_K, headline_entries
from grpo_ext.evaluation.report import metric_table, read_report

__all__ = ["read_checked_report"]


def read_checked_report(path: str | os.PathLike, model: str | None, checkpoint: Path) -> dict:
    """The result of `checkpoint` in the report at `path` (`model` picks one of several), checked as the module says;
    a `UserError` naming `--eval-report` and what is wrong."""
    with user_input("--eval-report"):  # a report that is not the harness's: one line naming the file
        report = read_report(path, model)
    where = f"--eval-report: {path}"
    _check_fingerprint(report, checkpoint, where)
    _check_numbers(report, where)
    return report


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
