"""The experiment's numbers: per arm, seed and iteration, with 95% bootstrap intervals over test problems, and the
issue's targets (reported, never asserted).

- pass@1 / maj@k: each problem's value (right count / n; its exact maj@k), resampled over problems
  (:func:`grpo_ext.evaluation.bootstrap.bootstrap_mean_ci`, 10,000 resamples, seed 0);
- a change between two policies (iterative's end against its start, iterative against frozen at the end) is paired
  by problem (:func:`~grpo_ext.evaluation.bootstrap.bootstrap_paired_difference_ci`): it holds beyond the evaluation
  noise when its interval excludes 0;
- the hacking gap of a logged training window: the RM's reward minus the verifier's on the same training samples.
  For a process RM at the step level (mean step score of the PRM minus that of the step verifier), else at the
  outcome level (the RM's verdict minus the verifier's right rate). Positive: the RM rates the policy's samples
  better than they are.
"""

from __future__ import annotations

import numpy as np

from grpo_ext.evaluation.bootstrap import bootstrap_mean_ci, bootstrap_paired_difference_ci
from grpo_ext.evaluation.registry import MAJ_AT_K, PASS_AT_1, PASS_AT_K
from grpo_ext.experiments.iterative.policy import gap_of

__all__ = ["BOOTSTRAP", "TARGET_GAIN", "summarize", "training_gap_curve"]

BOOTSTRAP = {"n_resamples": 10_000, "seed": 0, "confidence": 0.95}
#: The issue's first target: iterative ends at least this far above its starting pass@1.
TARGET_GAIN = 0.03


def training_gap_curve(history: list[dict]) -> list[tuple[int, float]]:
    """``(GRPO step counted over all iterations, gap)`` for every logged window of every iteration."""
    out, offset = [], 0
    for row in history[1:]:
        for point in row.get("training_curve", []):
            gap = gap_of(point)
            if gap is not None:
                out.append((offset + point["step"], gap))
        offset += row.get("grpo_steps", 0)
    return out


def _accuracy(row: dict, k: int) -> np.ndarray | None:
    """Per test problem, pass@1 (its right samples over the k drawn), from the iteration's row."""
    counts = row.get("test_n_correct")
    return None if counts is None else np.asarray(counts, dtype=float) / k


def _majority(row: dict, k: int) -> np.ndarray | None:
    """Per test problem, maj@k as the harness computed it, from the iteration's row."""
    values = row.get(f"test_{MAJ_AT_K.at(k)}")
    return None if values is None else np.asarray(values, dtype=float)


def _interval(values: np.ndarray | None) -> dict | None:
    if values is None:
        return None
    ci = bootstrap_mean_ci(values, **BOOTSTRAP)
    return {"estimate": float(ci.estimate), "low": float(ci.low), "high": float(ci.high)}


def _difference(a: np.ndarray | None, b: np.ndarray | None) -> dict | None:
    if a is None or b is None or a.shape != b.shape:
        return None
    ci = bootstrap_paired_difference_ci(a, b, **BOOTSTRAP)
    return {"estimate": float(ci.estimate), "low": float(ci.low), "high": float(ci.high)}


def _gap_means(row: dict) -> dict:
    gaps = [g for g in (gap_of(p) for p in row.get("training_curve", [])) if g is not None]
    return {"gap_mean": float(np.mean(gaps)) if gaps else None, "gap_last": gaps[-1] if gaps else None}


def _value(metric) -> float:
    """An interval's estimate, or a plain number as it is."""
    return metric["estimate"] if isinstance(metric, dict) else float(metric)


def _series(history: list[dict], k: int) -> list[dict]:
    """One entry per iteration: the policy's intervals, the RM's numbers, the training rewards and the gap."""
    out = []
    for row in history:
        entry = {"iteration": row["iteration"], "seconds": row.get("seconds")}
        entry[PASS_AT_K.at(1)] = _interval(_accuracy(row, k))
        entry[MAJ_AT_K.at(k)] = _interval(_majority(row, k))
        for key, value in row.items():
            if key.startswith(("rm_", "train_")) or key in ("policy_sample_accuracy", "guard_stopped_at", "grpo_steps"):
                entry[key] = value
        entry["pool_accuracy"] = row.get("policy_sample_accuracy")
        entry.update(_gap_means(row))
        out.append(entry)
    return out


def _targets(states: dict, seeds: list[int], k: int) -> list[dict]:
    """Per seed: iterative's end against its start, and against frozen's end (paired intervals)."""
    rows = []
    for seed in seeds:
        iterative = states.get("iterative", {}).get(seed)
        frozen = states.get("frozen", {}).get(seed)
        if iterative is None or len(iterative["history"]) < 2:
            continue
        first, last = iterative["history"][0], iterative["history"][-1]
        gain = _difference(_accuracy(last, k), _accuracy(first, k))
        entry = {"seed": seed, "iteration": last["iteration"], "start": first[PASS_AT_1], "end": last[PASS_AT_1]}
        entry["gain"] = gain
        entry["gain_target_met"] = gain is not None and gain["estimate"] >= TARGET_GAIN
        same = frozen is not None and len(frozen["history"]) == len(iterative["history"])
        if same:
            vs = _difference(_accuracy(last, k), _accuracy(frozen["history"][-1], k))
            entry["vs_frozen"] = vs
            entry["above_frozen_beyond_noise"] = vs is not None and vs["low"] > 0
        rows.append(entry)
    return rows


def _against_base(states: dict, arms: list[str], seeds: list[int], k: int) -> dict:
    """Per arm: test pass@1 at its last iteration minus the base's (iteration 0), paired by problem, per seed and for
    the mean of the seeds (each problem's pass@1 averaged over the seeds first) when every seed reached the same
    iteration: the verifier arm has no target of its own, but its change is the reference for the others."""
    out = {}
    for arm in arms:
        runs = [(seed, states.get(arm, {}).get(seed)) for seed in seeds]
        runs = [(seed, run["history"]) for seed, run in runs if run is not None and len(run["history"]) >= 2]
        if not runs:
            continue
        ends = [_accuracy(history[-1], k) for _, history in runs]
        starts = [_accuracy(history[0], k) for _, history in runs]
        entry = {
            "iterations": [history[-1]["iteration"] for _, history in runs],
            "per_seed": {str(seed): _difference(a, b) for (seed, _), a, b in zip(runs, ends, starts, strict=True)},
        }
        arrays = ends + starts
        complete = len(runs) == len(seeds) and len(set(entry["iterations"])) == 1
        if complete and all(x is not None for x in arrays) and len({x.shape for x in arrays}) == 1:
            entry["mean"] = _difference(np.mean(ends, axis=0), np.mean(starts, axis=0))
        out[arm] = entry
    return out


def summarize(states: dict, arms: list[str], seeds: list[int], k: int) -> dict:
    """``{"arms": {arm: {seed: [per-iteration entries]}}, "means": {arm: [...]}, "targets": [...]}``."""
    arms_out: dict = {}
    means: dict = {}
    for arm in arms:
        runs = states.get(arm, {})
        arms_out[arm] = {str(seed): _series(runs[seed]["history"], k) for seed in seeds if seed in runs}
        # mean over the seeds that reached each iteration, with the seeds' range (the plot's band)
        depth = max((len(s) for s in arms_out[arm].values()), default=0)
        means[arm] = []
        for i in range(depth):
            entries = [s[i] for s in arms_out[arm].values() if len(s) > i and s[i][PASS_AT_1] is not None]
            row = {"iteration": i, "seeds": len(entries)}
            for metric in (PASS_AT_1, MAJ_AT_K.at(k), "pool_accuracy"):
                values = [_value(e[metric]) for e in entries if e.get(metric) is not None]
                if values:
                    row[metric] = {"mean": float(np.mean(values)), "min": min(values), "max": max(values)}
            gaps = [e["gap_mean"] for e in entries if e.get("gap_mean") is not None]
            if gaps:
                row["gap_mean"] = {"mean": float(np.mean(gaps)), "min": min(gaps), "max": max(gaps)}
            means[arm].append(row)
    return {
        "arms": arms_out,
        "means": means,
        "targets": _targets(states, seeds, k),
        "against_base": _against_base(states, arms, seeds, k),
        "bootstrap": BOOTSTRAP,
    }
