"""Where the base's pass@k catches up with an arm's: the crossover of their pass@k curves, per arm.

DeepSeekMath (5.2.2) reads RL as sharpening the output distribution: pass@1 and maj@K rise, pass@K at large K does
not. The crossover says it in one number: the smallest k at which the model behind at k = 1 (normally the base)
reaches the other's pass@k, searched over the powers of two up to the smaller n of the two (an arm scored at n = 4
is searched to k = 4, one scored at n = 64 to k = 64). An arm's per-problem pass@k is the mean over its seeds, as
every number of the report; the interval is the bootstrap's over problems, paired
(:func:`grpo_ext.evaluation.bootstrap.crossover_k`), and each seed's own crossover is listed beside it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from grpo_ext.evaluation.analysis import DEFAULT_BOOTSTRAP, BootstrapSettings, crossover_summary, per_problem_values
from grpo_ext.evaluation.registry import PASS_AT_K, default_ks
from grpo_ext.evaluation.report_md import crossover_text
from grpo_ext.report_format import md_header, md_row

__all__ = ["arm_crossover", "render_crossovers"]

#: A seed's crossover is the point of its own curves; its interval would be the bootstrap's of one seed, not shown.
_POINT_ONLY = BootstrapSettings(n_resamples=1)


def _pass_at(result: dict, ks: Sequence[int], ids: Sequence[str]) -> np.ndarray:
    values = per_problem_values(result, PASS_AT_K.name, [str(k) for k in ks], ids)
    if values is None:
        raise ValueError("the result has no per-problem counts to compute pass@k from")
    return values


def arm_crossover(results: Sequence[dict], base: dict) -> dict:
    """The crossover of an arm's pass@k (its ``results``: one per seed) against the base's, on the problems all of
    them were scored on: ``crossover_summary``'s fields with A the base and B the arm (``leader`` "a": the base leads
    at k = 1), plus ``n`` (where the search stops) and ``per_seed`` (each seed's crossover k, None: none within n)."""
    n = min(int(r["n"]) for r in [*results, base])
    ks = default_ks(n, with_n=False)
    shared = set.intersection(*({str(p["problem_id"]) for p in r["per_problem"]} for r in [*results, base]))
    ids = sorted(shared)
    base_pass = _pass_at(base, ks, ids)
    seeds = [_pass_at(r, ks, ids) for r in results]
    out = crossover_summary(base_pass, np.mean(seeds, axis=0), ks, DEFAULT_BOOTSTRAP)
    per_seed = [crossover_summary(base_pass, s, ks, _POINT_ONLY) for s in seeds]
    return {**out, "n": n, "per_seed": [{"leader": s["leader"], "k": s["k"]} for s in per_seed]}


def _seed_text(seed: dict, leader: str | None, reference: str) -> str:
    k = "none" if seed["k"] is None else str(seed["k"])
    if seed["leader"] == leader:
        return k
    return f"{k} (the {reference if seed['leader'] == 'a' else 'arm'} leads)" if seed["leader"] else "tie at k = 1"


def render_crossovers(crossovers: dict[str, dict], reference_label: str = "base") -> list[str]:
    """The report's section: per arm, who leads at k = 1 and where the other's pass@k catches up; the run the records
    call ``base`` (A of every crossover) is shown as ``reference_label`` (a study's start, e.g. "SFT start")."""
    if not crossovers:
        return []
    ref = f"the {reference_label}"
    lines = [
        f"## Pass@k against {ref}: the crossover",
        "",
        "The smallest k at which the model behind at k = 1 reaches the other's pass@k (powers of two up to the "
        "smaller n of the two; the arm's pass@k is its seed mean), with its 95% bootstrap interval over problems. "
        f"An arm above {ref} at k = 1 that {ref} catches up with at a small k has sharpened what {ref} "
        "could already do (DeepSeekMath 5.2.2) rather than taught it new problems.",
        "",
        *md_header(["arm", "searched to k", "crossover", "per seed"], "lrll"),
    ]
    for arm, c in crossovers.items():
        text = crossover_text(c, c["n"], (ref, arm))
        seeds = ", ".join(_seed_text(s, c["leader"], reference_label) for s in c["per_seed"])
        lines.append(md_row([arm, str(c["n"]), text, seeds]))
    return [*lines, ""]
