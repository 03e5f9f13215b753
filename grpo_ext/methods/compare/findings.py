"""The numbers of a comparison: per-method statistics over runs (seeds), and the paper's findings with a verdict.

A finding pairs runs by label (seed) and judges each pair against a margin: the larger of a tolerance and twice
the evaluation standard error (over problems) of the paired difference, so neither seed noise nor evaluation noise
passes for an effect.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from grpo_ext.evaluation.metrics import pass_at_k_many
from grpo_ext.methods.compare.runs import Run
from grpo_ext.methods.paradigm import BASE_RUN, METHODS, get_method

__all__ = ["DEFAULT_TOLERANCE", "findings", "summarize"]

#: Paper findings are "agrees" only when every seed shows the stated direction by more than this (pass@1 points).
DEFAULT_TOLERANCE = 0.01


def _kmax(runs: Sequence[Run]) -> int:
    """The largest K every run was evaluated at (the report's maj@K / pass@K column)."""
    return min(r.result["ks"][-1] for r in runs)


def _stat(values: list[float]) -> dict:
    values = [float(v) for v in values]
    return {
        "mean": float(np.mean(values)),
        "min": min(values),
        "max": max(values),
        "std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
        "values": values,
        "count": len(values),
    }


def run_metrics(run: Run, k_max: int) -> dict:
    """A run's headline numbers: pass@1, maj@k_max, pass@k_max."""
    r = run.result
    return {
        "pass@1": r["pass@k"].get("1", r.get("mean_accuracy")),
        f"maj@{k_max}": r["maj@k"][str(k_max)],
        f"pass@{k_max}": r["pass@k"][str(k_max)],
    }


def summarize(runs: Sequence[Run]) -> dict:
    """Per method (in METHODS order, base first): the metrics' mean / min / max / std over its runs, and cost."""
    k_max = _kmax(runs)
    order = [BASE_RUN, *METHODS]
    out = {}
    for method in order:
        mine = [r for r in runs if r.method == method]
        if not mine:
            continue
        metrics = [run_metrics(r, k_max) for r in mine]
        entry = {
            "runs": [r.name for r in mine],
            "metrics": {m: _stat([x[m] for x in metrics]) for m in metrics[0]},
            "pass@k": {},
            "maj@k": {},
        }
        for k in sorted({k for r in mine for k in r.result["ks"]}):
            have = [r for r in mine if str(k) in r.result["pass@k"]]
            entry["pass@k"][k] = _stat([r.result["pass@k"][str(k)] for r in have])
            entry["maj@k"][k] = _stat([r.result["maj@k"][str(k)] for r in have])
        costs = [r.cost for r in mine if r.cost]
        if costs:
            entry["cost"] = {
                key: _stat([c[key] for c in costs])
                for key in ("samples_generated", "generated_tokens", "trained_sequences", "wall_seconds")
                if all(isinstance(c.get(key), int | float) for c in costs)
            }
        out[method] = entry
    return {"k_max": k_max, "methods": out}


def _paired_se(a: Run, b: Run, k: int) -> float | None:
    """Standard error over problems of the paired pass@k difference a - b (evaluation noise, not seed noise)."""
    pa = {p["problem_id"]: p["n_correct"] for p in a.result.get("per_problem", [])}
    pb = {p["problem_id"]: p["n_correct"] for p in b.result.get("per_problem", [])}
    ids = sorted(set(pa) & set(pb))
    if len(ids) < 2 or a.result["n"] != b.result["n"] or k > a.result["n"]:
        return None
    n = a.result["n"]
    da = pass_at_k_many(np.full(len(ids), n), np.array([pa[i] for i in ids]), k)
    db = pass_at_k_many(np.full(len(ids), n), np.array([pb[i] for i in ids]), k)
    diff = np.asarray(da) - np.asarray(db)
    return float(np.std(diff, ddof=1) / math.sqrt(len(ids)))


def _pairs(runs: Sequence[Run], a: str, b: str) -> list[tuple[Run, Run]]:
    """Runs of methods a and b paired by label; the base (one run) pairs with every run; else every a x b."""
    ra = [r for r in runs if r.method == a]
    rb = [r for r in runs if r.method == b]
    if not ra or not rb:
        return []
    if len(rb) == 1 and b == BASE_RUN:
        return [(x, rb[0]) for x in ra]
    by_label = {r.label: r for r in rb}
    paired = [(x, by_label[x.label]) for x in ra if x.label in by_label]
    return paired if paired else [(x, y) for x in ra for y in rb]


def _verdict(diffs: list[float], margins: list[float]) -> str:
    """All pairs ahead by more than their margin: agrees; all behind by more: disagrees; else inconclusive."""
    if all(d > m for d, m in zip(diffs, margins, strict=True)):
        return "agrees"
    if all(d < -m for d, m in zip(diffs, margins, strict=True)):
        return "disagrees"
    return "inconclusive"


def _margins(pairs, k: int, tol: float) -> tuple[list[float], list[float]]:
    """Per pair: max(tolerance, 2 x the evaluation s.e. of the paired pass@k difference); and the s.e.s found."""
    ses = [_paired_se(x, y, k) for x, y in pairs]
    return [max(tol, 2 * s) if s is not None else tol for s in ses], [s for s in ses if s is not None]


def _fmt_diffs(pairs, diffs) -> str:
    return ", ".join(f"{x.label or x.name}: {d:+.3f}" for (x, _), d in zip(pairs, diffs, strict=True))


def _beats(runs, a: str, b: str, claim: str, tol: float, k_max: int) -> dict:
    """ "A beats B": judged on pass@1 per pair; maj@k_max differences are reported beside it."""
    pairs = _pairs(runs, a, b)
    if not pairs:
        missing = [m for m in (a, b) if not any(r.method == m for r in runs)]
        return {"claim": claim, "verdict": "not measured", "text": f"not measured: no run of {', '.join(missing)}"}
    diffs = [x.result["pass@k"]["1"] - y.result["pass@k"]["1"] for x, y in pairs]
    maj = [x.result["maj@k"][str(k_max)] - y.result["maj@k"][str(k_max)] for x, y in pairs]
    margins, ses = _margins(pairs, 1, tol)
    verdict = _verdict(diffs, margins)
    mean_a = np.mean([x.result["pass@k"]["1"] for x in {id(x): x for x, _ in pairs}.values()])
    mean_b = np.mean([y.result["pass@k"]["1"] for y in {id(y): y for _, y in pairs}.values()])
    text = (
        f"pass@1 {get_method(a).title} {mean_a:.3f} vs {get_method(b).title} {mean_b:.3f}: difference per "
        f"pair {_fmt_diffs(pairs, diffs)} (mean {np.mean(diffs):+.3f}"
        + (f", evaluation s.e. ~{np.mean(ses):.3f}" if ses else "")
        + f"); maj@{k_max} difference "
        f"{_fmt_diffs(pairs, maj)}."
    )
    return {
        "claim": claim,
        "verdict": verdict,
        "text": text,
        "metric": "pass@1",
        "diffs": diffs,
        f"maj@{k_max}_diffs": maj,
        "eval_se": float(np.mean(ses)) if ses else None,
        "pairs": [[x.name, y.name] for x, y in pairs],
    }


def _rl_majk(runs, rl: str, tol: float, k: int) -> dict:
    claim = f"RL raises Maj@K but not Pass@K (K={k}, {get_method(rl).title} vs the base)"
    pairs = _pairs(runs, rl, BASE_RUN)
    if not pairs:
        missing = [m for m in (rl, BASE_RUN) if not any(r.method == m for r in runs)]
        return {"claim": claim, "verdict": "not measured", "text": f"not measured: no run of {', '.join(missing)}"}
    d_maj = [x.result["maj@k"][str(k)] - y.result["maj@k"][str(k)] for x, y in pairs]
    d_pass = [x.result["pass@k"][str(k)] - y.result["pass@k"][str(k)] for x, y in pairs]
    margins, ses = _margins(pairs, k, tol)  # pass@k noise; maj@k is judged against the tolerance alone
    maj_up = all(d > tol for d in d_maj)
    if maj_up and all(d <= m for d, m in zip(d_pass, margins, strict=True)):
        verdict = "agrees"
    elif all(d <= tol for d in d_maj):
        verdict = "disagrees"  # RL did not raise Maj@K
    elif maj_up and all(d > m for d, m in zip(d_pass, margins, strict=True)):
        verdict = "disagrees"  # Pass@K rose too
    else:
        verdict = "inconclusive"
    base = pairs[0][1].result
    text = (
        f"base maj@{k} {base['maj@k'][str(k)]:.3f}, pass@{k} {base['pass@k'][str(k)]:.3f}; change in maj@{k}: "
        f"{_fmt_diffs(pairs, d_maj)}; change in pass@{k}: {_fmt_diffs(pairs, d_pass)}"
        + (f" (evaluation s.e. of the pass@{k} change ~{np.mean(ses):.3f})" if ses else "")
        + "."
    )
    return {
        "claim": claim,
        "verdict": verdict,
        "text": text,
        f"maj@{k}_diffs": d_maj,
        f"pass@{k}_diffs": d_pass,
        "pairs": [[x.name, y.name] for x, y in pairs],
    }


def findings(runs: Sequence[Run], tolerance: float = DEFAULT_TOLERANCE) -> list[dict]:
    """The paper's four findings, each with a verdict ("agrees" / "disagrees" / "inconclusive" / "not measured").

    "A beats B" is judged on pass@1 (the paper's top-1 accuracy), paired by label (seed). A pair's margin is the
    larger of ``tolerance`` and twice the evaluation standard error of its paired pass@1 difference (over
    problems): the finding agrees when A is ahead by more than the margin in every pair, disagrees when behind by
    more than it in every pair, and is inconclusive otherwise. "RL raises Maj@K but not Pass@K" compares GRPO
    (outcome) with the base at the largest K: it agrees when maj@K rises by more than ``tolerance`` in every pair
    and pass@K by no more than its margin.
    """
    k = _kmax(runs)
    return [
        _beats(runs, "online_rft", "rft", "Online RFT beats RFT", tolerance, k),
        _beats(
            runs,
            "grpo_outcome",
            "online_rft",
            "GRPO beats online RFT (outcome supervision, same rewards)",
            tolerance,
            k,
        ),
        _beats(
            runs, "grpo_process", "grpo_outcome", "Process supervision beats outcome supervision (GRPO)", tolerance, k
        ),
        _rl_majk(runs, "grpo_outcome", tolerance, k),
    ]
