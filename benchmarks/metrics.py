"""Sample metrics at scale: pass@k and maj@k for 10,000 problems x n = 64, and every metric for 1,000 x n = 1024.

    python -m benchmarks.metrics [--reps 7] [--large-reps 3] [--exact-baseline]

1. Target: <= 2 s in total (pass@k and maj@k, every k), measured cold: the memo caches of maj@k are cleared before
   every repetition. The samples are synthetic but shaped like a model's: per-problem accuracy spread over [0, 1],
   a handful of recurring wrong answers with Zipf-like frequencies, ~5% samples without an answer. A second,
   harder regime (`diverse`: up to 40 distinct wrong answers per problem, like a weak model on GSM8K) is reported
   for information.
2. Target: <= 30 s for 1,000 problems x n = 1024 samples, every metric at every k = 1, 2, 4, ..., 1024: pass@k,
   pass^k, maj@k (exact), Cover@tau, answer diversity, and a 95% bootstrap interval (10,000 resamples) of every
   mean, from the raw answers, cold. Most problems put their samples on a few answers plus a tail of singletons;
   15% have hundreds of distinct answers (see `make_large_problems`).
3. For information, single problems at n = 1024 that the exact-integer maj@k engine (the only one before the
   spectral engine) found slow: every k from 1 to 1024 with 51 and with 193 distinct answers, and k = 512 alone
   with 1024 distinct answers. ``--exact-baseline`` times the exact engine on them too (minutes).
"""

from __future__ import annotations

import argparse
import random
import time

import numpy as np

from benchmarks import _common
from grpo_ext.evaluation import bootstrap, majority, metrics

TARGET_S = 2.0
LARGE_TARGET_S = 30.0
TAUS = (0.1, 0.25, 0.5, 0.75, 0.9)  # Cover@tau thresholds
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


def make_large_problems(n_problems: int, n: int, seed: int = 0):
    """`n` samples per problem: per-problem accuracy spread over [0, 1], ~5% None, up to 6% junk answers seen once
    (a tail of singletons); 85% of problems put their wrong samples on 1-8 recurring answers (Zipf 1.2), 15% on
    150-600 (Zipf 0.5-1.0: hundreds of distinct answers)."""
    rng = np.random.default_rng(seed)
    answers, correct = [], []
    for p in range(n_problems):
        accuracy = rng.beta(0.8, 0.8)
        diverse = rng.random() < 0.15
        n_wrong = int(rng.integers(150, 600)) if diverse else int(rng.integers(1, 9))
        weights = 1 / np.arange(1, n_wrong + 1) ** (rng.uniform(0.5, 1.0) if diverse else 1.2)
        p_none, p_single = 0.05, rng.uniform(0.0, 0.06)
        u = rng.random(n)
        p_right = p_none + p_single + (1 - p_none - p_single) * accuracy
        kind = np.select([u < p_none, u < p_none + p_single, u < p_right], [0, 1, 2], 3).tolist()
        wrong = rng.choice(n_wrong, size=n, p=weights / weights.sum()).tolist()
        row = [
            None if kd == 0 else f"{p}s{i}" if kd == 1 else str(p) if kd == 2 else f"{p}w{wrong[i]}"
            for i, kd in enumerate(kind)
        ]
        answers.append(row)
        correct.append([kd == 2 for kd in kind])
    return answers, correct


def all_metrics(answers, correct, ks, n_resamples: int = 10_000, seed: int = 0) -> tuple[dict, dict]:
    """Every per-problem metric at every k and the bootstrap interval of every mean: (seconds per part, means)."""
    parts, clock = {}, time.perf_counter()

    def lap(name):
        nonlocal clock
        now = time.perf_counter()
        parts[name] = now - clock
        clock = now

    n = np.array([len(row) for row in correct])
    c = np.array([sum(row) for row in correct])
    columns = {f"pass@{k}": metrics.pass_at_k_many(n, c, k) for k in ks}
    lap("pass@k")
    columns |= {f"pass^{k}": metrics.pass_hat_k_many(n, c, k) for k in ks}
    lap("pass^k")
    maj = metrics.maj_at_k_many(answers, correct, ks)
    columns |= {f"maj@{k}": maj[:, i] for i, k in enumerate(ks)}
    lap("maj@k")
    columns |= {f"cover@{tau}": metrics.cover_at_many(n, c, tau) for tau in TAUS}
    lap("cover@tau")
    distinct, entropy = metrics.answer_diversity_many(answers)
    columns |= {"distinct_answers": distinct.astype(float), "answer_entropy_bits": entropy}
    lap("diversity")
    ci = bootstrap.bootstrap_mean_ci(np.column_stack(list(columns.values())), n_resamples=n_resamples, seed=seed)
    lap("bootstrap")
    means = {name: [float(ci.estimate[i]), float(ci.low[i]), float(ci.high[i])] for i, name in enumerate(columns)}
    return parts, means


def zipf_problem(n: int, distinct: int, seed: int = 0):
    """One problem with exactly `distinct` answers, Zipf(1.1) frequencies, ~3% None; the top answer is correct."""
    rng = np.random.default_rng(seed)
    weights = 1 / np.arange(1, distinct + 1) ** 1.1
    keys = np.concatenate([np.arange(distinct), rng.choice(distinct, size=n - distinct, p=weights / weights.sum())])
    answers = [None if rng.random() < 0.03 and i >= distinct else int(key) for i, key in enumerate(keys.tolist())]
    return answers, [a == 0 for a in answers]


SINGLE_CASES = {  # name: (problem, ks); the exact engine took 14.7 s, 25.9 s and 77.8 s on the machine that asked
    "every k, 51 distinct answers": (lambda n: zipf_problem(n, 51), lambda n: range(1, n + 1)),
    "every k, 193 distinct answers": (lambda n: zipf_problem(n, 193), lambda n: range(1, n + 1)),
    "k = n/2, all answers distinct": (lambda n: (list(range(n)), [True] + [False] * (n - 1)), lambda n: [n // 2]),
}


def time_single_cases(n: int, exact_baseline: bool) -> dict:
    out = {}
    for name, (problem, ks) in SINGLE_CASES.items():
        answers, correct = problem(n)
        classes, n_none = metrics.answer_signature(answers, correct)
        ks = tuple(ks(n))
        majority.clear_caches()
        start = time.perf_counter()
        new = majority.maj_from_signature(classes, n_none, ks)
        row = {"distinct_answers": len(classes), "n_ks": len(ks), "seconds": time.perf_counter() - start}
        if exact_baseline:
            majority.clear_caches()
            start = time.perf_counter()
            old = majority.exact_from_signature(classes, n_none, ks)
            row["exact_engine_seconds"] = time.perf_counter() - start
            row["max_abs_difference"] = float(np.max(np.abs(np.subtract(new, old))))
        print(f"  {name}: {row}", flush=True)
        out[name] = row
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--problems", type=int, default=10_000)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--large-problems", type=int, default=1000)
    parser.add_argument("--large-n", type=int, default=1024)
    parser.add_argument("--large-reps", type=int, default=3)
    parser.add_argument("--exact-baseline", action="store_true", help="also time the exact maj@k engine (minutes)")
    args = parser.parse_args(argv)
    _common.set_threads(1)
    load_start = _common.load_average()
    ks = tuple(k for k in KS if k <= args.n)

    data = {regime: make_problems(args.problems, args.n, regime) for regime in REGIMES}
    distinct = {r: len({metrics.answer_signature(a, c) for a, c in zip(*data[r], strict=True)}) for r in REGIMES}
    # spot check against the one-problem functions on a few problems
    answers, correct = data["realistic"]
    _, _, means = run_all(answers[:50], correct[:50], ks)
    for p in range(5):
        for k in (1, 8, 64):
            assert (
                abs(
                    metrics.maj_at_k_many([answers[p]], [correct[p]], [k])[0, 0]
                    - metrics.maj_at_k(answers[p], correct[p], k)
                )
                < 1e-12
            )

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

    times = _common.alternate(
        {r: runner(r) for r in REGIMES}, reps=args.reps, warmup=1, before=lambda name, r: clear_caches()
    )
    load = _common.load_average()
    rows, summaries = [], {}
    for regime in REGIMES:
        total = _common.summary(times[regime])
        summaries[regime] = {
            "total_seconds": total,
            "pass_seconds": _common.summary(split[regime]["pass"]),
            "maj_seconds": _common.summary(split[regime]["maj"]),
            "distinct_signatures": distinct[regime],
            "metric_means": results_means[regime],
        }
        is_target = regime == "realistic"
        rows.append(
            [
                f"pass@k + maj@k, {args.problems} problems, n={args.n}, k=1..{ks[-1]} ({regime}; "
                f"{distinct[regime]} distinct signatures), cold caches, median of {total['n']}",
                f"{total['median']:.2f} s (pass {summaries[regime]['pass_seconds']['median']:.3f} s, "
                f"maj {summaries[regime]['maj_seconds']['median']:.2f} s)",
                f"<= {TARGET_S:.0f} s" if is_target else "(info)",
                _common.verdict(total["median"] <= TARGET_S) if is_target else "",
                " / ".join(map(str, load)) if is_target else "",
            ]
        )
    passed = summaries["realistic"]["total_seconds"]["median"] <= TARGET_S

    # 2. every metric, 1,000 problems x n = 1024
    large_ks = tuple(2**i for i in range(args.large_n.bit_length()) if 2**i <= args.large_n)
    answers, correct = make_large_problems(args.large_problems, args.large_n)
    for p in range(3):  # spot check: maj@1 is the share of samples voting for the correct answer
        got = metrics.maj_at_k(answers[p], correct[p], 1)
        assert abs(got - sum(correct[p]) / args.large_n) < 1e-12, (p, got)
    shape = [len(metrics.answer_signature(a, c)[0]) for a, c in zip(answers, correct, strict=True)]
    large_parts: list[dict] = []
    large_means = {}

    def large(r):
        parts, means = all_metrics(answers, correct, large_ks)
        large_parts.append(parts)
        large_means.update(means)

    large_load = _common.load_average()
    large_times = _common.alternate(
        {"large": large}, reps=args.large_reps, warmup=0, before=lambda name, r: clear_caches()
    )["large"]
    large_total = _common.summary(large_times)
    large_passed = large_total["median"] <= LARGE_TARGET_S
    part_medians = {name: _common.median([p[name] for p in large_parts]) for name in large_parts[0]}
    rows.append(
        [
            f"every metric (pass@k, pass^k, maj@k, Cover@tau, diversity, 95% bootstrap CI of each mean), "
            f"{args.large_problems} problems, n={args.large_n}, k=1..{large_ks[-1]} (answers per problem: median "
            f"{int(np.median(shape))}, max {max(shape)}), cold caches, median of {large_total['n']}",
            f"{large_total['median']:.1f} s (maj@k {part_medians['maj@k']:.1f} s, "
            f"bootstrap {part_medians['bootstrap']:.2f} s)",
            f"<= {LARGE_TARGET_S:.0f} s",
            _common.verdict(large_passed),
            " / ".join(map(str, large_load)),
        ]
    )

    # 3. single slow problems (information)
    singles = time_single_cases(args.large_n, args.exact_baseline)
    for name, row in singles.items():
        old = f"; exact engine {row['exact_engine_seconds']:.1f} s" if "exact_engine_seconds" in row else ""
        rows.append(
            [
                f"maj@k of one problem, n={args.large_n}, {name} ({row['n_ks']} k)",
                f"{row['seconds']:.2f} s{old}",
                "(info)",
                "",
                "",
            ]
        )

    table = _common.markdown_table(["measure", "value", "target", "result", "load avg (1/5/15 min)"], rows)
    payload = {
        "params": vars(args) | {"ks": list(ks)},
        "load_average_start": load_start,
        "regimes": summaries,
        "median_seconds": summaries["realistic"]["total_seconds"]["median"],
        "target": f"<= {TARGET_S} s total (realistic regime)",
        "pass": passed,
        "large": {
            "problems": args.large_problems,
            "n": args.large_n,
            "ks": list(large_ks),
            "taus": list(TAUS),
            "bootstrap": {"n_resamples": 10_000, "seed": 0, "confidence": 0.95},
            "answer_classes_per_problem": {
                "median": float(np.median(shape)),
                "p90": float(np.percentile(shape, 90)),
                "max": max(shape),
            },
            "total_seconds": large_total,
            "part_seconds_median": part_medians,
            "target": f"<= {LARGE_TARGET_S} s",
            "pass": large_passed,
            "metric_means_with_ci": large_means,
        },
        "single_problems": singles,
    }
    _common.write_results("metrics", payload, table)
    return payload


def summary_rows() -> list[list]:
    """This benchmark's rows of the `run_all` summary (:func:`benchmarks._common.dated_rows`)."""

    def rows(r):
        p = r["params"]
        measure = f"pass@k + maj@k, {p['problems']} problems, n={p['n']}, k=1..{p['ks'][-1]}"
        yield measure, f"{r['median_seconds']:.2f} s", "<= 2 s", _common.verdict(r["pass"])
        large = r.get("large")
        if large:
            measure = (
                f"every metric + bootstrap, {large['problems']} problems, n={large['n']}, "
                f"k=1..{large['ks'][-1]} (powers of two)"
            )
            yield measure, f"{large['total_seconds']['median']:.1f} s", "<= 30 s", _common.verdict(large["pass"])

    return _common.dated_rows(_common.load_result("metrics"), rows)


if __name__ == "__main__":
    main()
