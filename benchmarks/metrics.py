"""pass@k and maj@k for 10,000 problems with n = 64 samples each, k in 1, 2, 4, ..., 64.

    python -m benchmarks.metrics [--reps 7]

Target: <= 2 s in total (pass@k and maj@k, every k), measured cold: the memo caches of maj@k are cleared before
every repetition. The samples are synthetic but shaped like a model's: per-problem accuracy spread over [0, 1],
a handful of recurring wrong answers with Zipf-like frequencies, ~5% samples without an answer. A second,
harder regime (`diverse`: up to 40 distinct wrong answers per problem, like a weak model on GSM8K) is reported
for information.
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from benchmarks import _common as C
from grpo_ext.evaluation import majority, metrics

TARGET_S = 2.0
KS = (1, 2, 4, 8, 16, 32, 64)
REGIMES = {  # max distinct wrong answers, Zipf exponent of their frequencies, share of samples with no answer
    "realistic": (8, 1.2, 0.05),
    "diverse": (40, 0.6, 0.10),
}


def make_problems(n_problems: int, n: int, regime: str, seed: int = 0):
    """answers (normalised keys, None = no answer) and correctness flags, `n` samples per problem."""
    max_wrong, zipf, p_none = REGIMES[regime]
    rng = random.Random(seed)
    answers, correct = [], []
    for p in range(n_problems):
        accuracy = rng.betavariate(0.8, 0.8)  # U-shaped: many easy and many hard problems, as in practice
        n_wrong = rng.randint(1, max_wrong)
        weights = [1 / (j + 1) ** zipf for j in range(n_wrong)]
        right = str(p)
        wrongs = [f"{p}w{j}" for j in range(n_wrong)]
        row_a, row_c = [], []
        for _ in range(n):
            u = rng.random()
            if u < p_none:
                row_a.append(None)
                row_c.append(False)
            elif u < p_none + (1 - p_none) * accuracy:
                row_a.append(right)
                row_c.append(True)
            else:
                row_a.append(rng.choices(wrongs, weights)[0])
                row_c.append(False)
        answers.append(row_a)
        correct.append(row_c)
    return answers, correct


def clear_caches() -> None:
    majority.clear_caches()


def run_all(answers, correct, ks=KS) -> tuple[float, float, dict]:
    """(seconds for pass@k, seconds for maj@k, the mean of each metric)."""
    start = time.perf_counter()
    n = np.array([len(row) for row in correct])
    c = np.array([sum(row) for row in correct])
    pass_k = {k: metrics.pass_at_k_many(n, c, k) for k in ks}
    middle = time.perf_counter()
    maj = metrics.maj_at_k_many(answers, correct, ks)
    end = time.perf_counter()
    means = {f"pass@{k}": float(v.mean()) for k, v in pass_k.items()}
    means |= {f"maj@{k}": float(maj[:, i].mean()) for i, k in enumerate(ks)}
    return middle - start, end - middle, means


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", type=int, default=10_000)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args(argv)
    C.set_threads(1)
    load_start = C.load_average()
    ks = tuple(k for k in KS if k <= args.n)

    data = {regime: make_problems(args.problems, args.n, regime) for regime in REGIMES}
    distinct = {r: len({metrics.answer_signature(a, c) for a, c in zip(*data[r], strict=True)}) for r in REGIMES}
    # spot check against the one-problem functions on a few problems
    answers, correct = data["realistic"]
    _, _, means = run_all(answers[:50], correct[:50], ks)
    for p in range(5):
        for k in (1, 8, 64):
            assert abs(metrics.maj_at_k_many([answers[p]], [correct[p]], [k])[0, 0]
                       - metrics.maj_at_k(answers[p], correct[p], k)) < 1e-12

    split: dict[str, dict[str, list[float]]] = {r: {"pass": [], "maj": []} for r in REGIMES}
    results_means = {}

    def runner(regime):
        def fn(r):
            t_pass, t_maj, m = run_all(*data[regime], ks)
            if r >= 0:
                split[regime]["pass"].append(t_pass)
                split[regime]["maj"].append(t_maj)
            results_means[regime] = m
        return fn

    times = C.alternate({r: runner(r) for r in REGIMES}, reps=args.reps, warmup=1,
                        before=lambda name, r: clear_caches())
    load = C.load_average()
    rows, summaries = [], {}
    for regime in REGIMES:
        total = C.summary(times[regime])
        summaries[regime] = {"total_seconds": total, "pass_seconds": C.summary(split[regime]["pass"]),
                             "maj_seconds": C.summary(split[regime]["maj"]), "distinct_signatures": distinct[regime],
                             "metric_means": results_means[regime]}
        is_target = regime == "realistic"
        rows.append([
            f"pass@k + maj@k, {args.problems} problems, n={args.n}, k=1..{ks[-1]} ({regime}; "
            f"{distinct[regime]} distinct signatures), cold caches, median of {total['n']}",
            f"{total['median']:.2f} s (pass {summaries[regime]['pass_seconds']['median']:.3f} s, "
            f"maj {summaries[regime]['maj_seconds']['median']:.2f} s)",
            f"<= {TARGET_S:.0f} s" if is_target else "(info)",
            C.verdict(total["median"] <= TARGET_S) if is_target else "",
            " / ".join(map(str, load)) if is_target else "",
        ])
    passed = summaries["realistic"]["total_seconds"]["median"] <= TARGET_S
    table = C.markdown_table(["measure", "value", "target", "result", "load avg (1/5/15 min)"], rows)
    payload = {
        "params": vars(args) | {"ks": list(ks)},
        "load_average_start": load_start,
        "regimes": summaries,
        "median_seconds": summaries["realistic"]["total_seconds"]["median"],
        "target": f"<= {TARGET_S} s total (realistic regime)",
        "pass": passed,
    }
    C.write_results("metrics", payload, table)
    return payload


if __name__ == "__main__":
    main()
