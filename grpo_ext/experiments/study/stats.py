"""The numbers of a study, as pure functions of its test results: per-arm means with intervals, paired
differences, the paper's findings with a verdict rule fixed here, and samples-to-reach from learning curves.

Intervals: 95% percentile bootstrap over the test problems (:mod:`grpo_ext.evaluation.bootstrap`) of the per-problem
value averaged over an arm's seeds; a difference between two arms is paired by problem (both arms' seed means on
the same problems, the same resamples). Seed-to-seed spread is reported beside it, per seed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from grpo_ext.evaluation.analysis import DEFAULT_BOOTSTRAP, per_problem_values
from grpo_ext.evaluation.bootstrap import bootstrap_mean_ci, bootstrap_runs_and_problems_ci
from grpo_ext.evaluation.registry import MAJ_AT_K, PASS_AT_1, PASS_AT_K, keyed_metrics
from grpo_ext.report_format import signed_with_seeds

__all__ = [
    "BOOTSTRAP",
    "FINDINGS",
    "MAJK_KS",
    "paper_findings",
    "arm_summary",
    "finding_text",
    "headline_metrics",
    "largest_k",
    "finding_beats",
    "finding_majk",
    "paired_difference",
    "per_problem",
    "samples_to_reach",
    "seed_matrix",
    "verdict",
    "why_not_comparable",
]

#: Every interval of a study report: the harness report's settings (95% percentile bootstrap over problems, 10,000
#: resamples, seed 0), as the keyword arguments of :mod:`grpo_ext.evaluation.bootstrap`.
BOOTSTRAP = DEFAULT_BOOTSTRAP.kwargs()


def headline_metrics(k_max: int) -> list[str]:
    """What a method report leads with, in its order: pass@1 (accuracy), maj@K and pass@K at its largest K."""
    pass_k, maj_k = PASS_AT_K, MAJ_AT_K
    return [pass_k.at(1), maj_k.at(k_max), pass_k.at(k_max)]


def per_problem(result: dict, metric: str) -> np.ndarray:
    """One value per problem of ``metric`` (``pass@k`` or ``maj@k``) from a harness result, in problem-id order
    (the values of :func:`grpo_ext.evaluation.analysis.per_problem_values`)."""
    k = metric[len(metric.rstrip("0123456789")) :]  # pass@4 -> 4, pass^4 -> 4
    name = metric[: len(metric) - len(k)] + "k"  # the registry's name: pass@k, pass^k
    if not k or name not in {m.name for m in keyed_metrics("k")}:  # the registry's metrics with one value per k
        raise ValueError(f"metric {metric!r}: expected one of {', '.join(m.name for m in keyed_metrics('k'))}")
    ids = [str(p["problem_id"]) for p in sorted(result["per_problem"], key=lambda p: p["problem_id"])]
    values = per_problem_values(result, name, [k], ids)
    if values is None:
        raise ValueError(f"metric {metric!r}: the result has no per-problem counts or {metric} values")
    return values[:, 0]


def seed_matrix(results: Sequence[dict], metric: str) -> np.ndarray:
    """(seeds, problems) for one arm; every seed must be scored on the same problems."""
    ids = [sorted(p["problem_id"] for p in r["per_problem"]) for r in results]
    if any(i != ids[0] for i in ids):
        raise ValueError("the runs of an arm were evaluated on different problems")
    return np.stack([per_problem(r, metric) for r in results])


def arm_summary(results: Sequence[dict], metrics: Sequence[str]) -> dict:
    """Per metric: the mean over seeds and problems with its interval, and each seed's mean."""
    out = {}
    for metric in metrics:
        matrix = seed_matrix(results, metric)
        ci = bootstrap_mean_ci(matrix.mean(axis=0), **BOOTSTRAP)
        out[metric] = {"mean": ci.estimate, "low": ci.low, "high": ci.high, "per_seed": matrix.mean(axis=1).tolist()}
    return out


def _paired(a: Sequence[dict], b: Sequence[dict], metric: str) -> tuple[np.ndarray, np.ndarray]:
    """A minus B on ``metric``: per problem (A's seed mean minus B's) and per seed (seeds paired by position). A
    single B run (the base) is one model for every seed, so each of A's seeds is measured against it."""
    ma, mb = seed_matrix(a, metric), seed_matrix(b, metric)
    if len(mb) == 1:
        mb = np.repeat(mb, len(ma), axis=0)  # leaves B's per-problem mean as it is
    seeds = min(len(ma), len(mb))
    return ma.mean(axis=0) - mb.mean(axis=0), ma[:seeds].mean(axis=1) - mb[:seeds].mean(axis=1)


def paired_difference(a: Sequence[dict], b: Sequence[dict], metric: str, minus: str | None = None) -> dict:
    """Arm A minus arm B on ``metric``: the seed-mean difference with its problem-paired interval, and the
    difference per seed (seeds paired by position: A's i-th seed against B's i-th; a single B run against each).

    With ``minus``, the value is A's gain over B in ``metric`` minus its gain in ``minus`` (DeepSeekMath's "Maj@K
    rises more than Pass@K" is ``metric="maj@64", minus="pass@64"``), paired the same way.

    ``over_seeds``: the interval of a two-level bootstrap that resamples each arm's seeds as well as the problems
    (:func:`grpo_ext.evaluation.bootstrap.bootstrap_runs_and_problems_ci`), where the main one resamples problems
    only; shown beside it, never part of :func:`verdict`'s rule."""
    by_problem, by_seed = _paired(a, b, metric)
    ma, mb = seed_matrix(a, metric), seed_matrix(b, metric)
    if minus is not None:
        minus_problem, minus_seed = _paired(a, b, minus)
        by_problem, by_seed = by_problem - minus_problem, by_seed - minus_seed
        ma, mb = ma - seed_matrix(a, minus), mb - seed_matrix(b, minus)
    ci = bootstrap_mean_ci(by_problem, **BOOTSTRAP)  # = bootstrap_paired_difference_ci of the two seed means
    seeds = bootstrap_runs_and_problems_ci(ma, mb, **BOOTSTRAP)
    out = {"metric": metric, "difference": ci.estimate, "low": ci.low, "high": ci.high, "per_seed": by_seed.tolist()}
    out["over_seeds"] = [seeds.low, seeds.high]
    return {**out, "minus": minus} if minus is not None else out


def verdict(diff: dict) -> str:
    """The rule every finding and expectation uses: the interval excludes 0 and every seed agrees in sign."""
    if diff["low"] > 0 and all(d > 0 for d in diff["per_seed"]):
        return "agrees"
    if diff["high"] < 0 and all(d < 0 for d in diff["per_seed"]):
        return "disagrees"
    return "inconclusive"


def finding_beats(claim: str, a: Sequence[dict], b: Sequence[dict]) -> dict:
    """ "A beats B" on test pass@1: agrees when A - B has a 95% interval above 0 and is positive in every seed,
    disagrees when the interval is below 0 and every seed negative, inconclusive otherwise."""
    diff = paired_difference(a, b, PASS_AT_1)
    return {"claim": claim, "verdict": verdict(diff), PASS_AT_1: diff}


def finding_majk(claim: str, rl: Sequence[dict], base: dict, ks: Sequence[int]) -> dict:
    """ "RL raises Maj@K more than Pass@K": at every K, (maj@K gain) - (pass@K gain) over the base has an interval
    above 0 and is positive in every seed. The base is one run, the same for every seed."""
    rows = []
    for k in ks:
        gap = paired_difference(rl, [base], MAJ_AT_K.at(k), minus=PASS_AT_K.at(k))
        gains = {m: float(_paired(rl, [base], f"{m}@{k}")[0].mean()) for m in ("maj", "pass")}
        interval = {key: gap[key] for key in ("difference", "low", "high", "per_seed", "over_seeds")}
        rows.append({"k": k, "maj_gain": gains["maj"], "pass_gain": gains["pass"], **interval})
    verdicts = {verdict(r) for r in rows}
    return {"claim": claim, "verdict": verdicts.pop() if len(verdicts) == 1 else "inconclusive", "by_k": rows}


#: DeepSeekMath's "A beats B" findings: (claim, arm A, arm B), judged on test pass@1 by :func:`finding_beats`.
FINDINGS = (
    ("Online RFT beats RFT", "online_rft", "rft"),
    ("GRPO beats online RFT", "grpo_outcome", "online_rft"),
    ("Process supervision beats outcome supervision", "grpo_process", "grpo_outcome"),
)
#: "RL raises Maj@K more than Pass@K" is judged at these K (those <= the evaluation's n; else at n itself).
MAJK_KS = (4, 16, 64)
MAJK_CLAIM = "RL (GRPO) raises Maj@K more than Pass@K"


def _not_measured(claim: str, why: str) -> dict:
    return {"claim": claim, "verdict": "not measured", "text": f"not measured: {why}"}


def why_not_comparable(*groups: Sequence[dict]) -> str | None:
    """Why these results cannot be judged together (no per-problem records, different problems), or None."""
    results = [r for group in groups for r in group]
    if not all(r.get("per_problem") and r.get("n") for r in results):
        return "a result has no per-problem records"
    ids = {tuple(sorted(str(p["problem_id"]) for p in r["per_problem"])) for r in results}
    return "the runs were evaluated on different problems" if len(ids) > 1 else None


def largest_k(results: Sequence[dict]) -> int:
    """The largest K every one of ``results`` reports (its ``ks``; else its ``n``)."""
    return min(int(r["ks"][-1]) if r.get("ks") else int(r["n"]) for r in results)


def paper_findings(arms: dict[str, Sequence[dict]], base: dict | None) -> list[dict]:
    """The paper's four findings, each judged by the one rule of this module (:func:`finding_beats`,
    :func:`finding_majk`): ``arms`` maps a method to its runs' test results (seeds, paired by position), ``base`` is
    the base's result. A finding whose arms are missing, or whose results cannot be paired by problem, is
    ``"not measured"`` with a ``text`` saying why. Maj@K against Pass@K is judged at every K of :data:`MAJK_KS` that
    GRPO's runs and the base both report (a study may score those two at a larger n than the other arms)."""
    out = []
    for claim, a, b in FINDINGS:
        missing = [m for m in (a, b) if not arms.get(m)]
        why = f"no run of {', '.join(missing)}" if missing else why_not_comparable(arms[a], arms[b])
        out.append(_not_measured(claim, why) if why else finding_beats(claim, arms[a], arms[b]))
    missing = [m for m, have in (("grpo_outcome", arms.get("grpo_outcome")), ("base", base)) if not have]
    why = f"no run of {', '.join(missing)}" if missing else why_not_comparable(arms["grpo_outcome"], [base])
    if why:
        out.append(_not_measured(MAJK_CLAIM, why))
    else:
        k_max = largest_k([*arms["grpo_outcome"], base])
        ks = [k for k in MAJK_KS if k <= k_max] or [k_max]
        out.append(finding_majk(MAJK_CLAIM, arms["grpo_outcome"], base, ks))
    return out


def finding_text(finding: dict) -> str:
    """The numbers behind a finding's verdict, as every report prints them."""
    if PASS_AT_1 in finding:
        return f"{PASS_AT_1} difference {signed_with_seeds(finding[PASS_AT_1])}"
    if "by_k" in finding:
        return "; ".join(
            f"K={r['k']}: maj gain {r['maj_gain']:+.3f}, pass gain {r['pass_gain']:+.3f}, gap {signed_with_seeds(r)}"
            for r in finding["by_k"]
        )
    return finding["text"]  # not measured: why


def samples_to_reach(curve_points: Sequence[dict], target: float) -> float | None:
    """Generated samples at which a learning curve first reaches ``target`` pass@1, interpolated linearly
    between evaluations; None when it never does."""
    points = [(p["samples_generated"], p["eval/pass@1"]) for p in curve_points if "samples_generated" in p]
    for (x0, y0), (x1, y1) in zip(points, points[1:], strict=False):
        if y0 >= target:
            return float(x0)
        if y1 >= target:
            return float(x0 + (x1 - x0) * (target - y0) / (y1 - y0))
    if points and points[-1][1] >= target:
        return float(points[-1][0])
    return None
