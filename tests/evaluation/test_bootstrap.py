"""Bootstrap intervals over problems, paired differences, the crossover k and solved-set overlap: checked against
plain resampling loops, hand-worked cases and the coverage of a synthetic case with a known mean."""

from __future__ import annotations

import json

import numpy as np
import pytest

from grpo_ext.evaluation.bootstrap import (
    RESAMPLE_BLOCK,
    bootstrap_mean_ci,
    bootstrap_paired_difference_ci,
    bootstrap_runs_and_problems_ci,
    crossover_k,
    resampled_means,
    solved_overlap,
)


def naive_resampled_indices(n_problems: int, n_resamples: int, seed: int) -> list[np.ndarray]:
    """The documented draws, one resample at a time: blocks of RESAMPLE_BLOCK rows of default_rng(seed).integers."""
    rng = np.random.default_rng(seed)
    rows = []
    for start in range(0, n_resamples, RESAMPLE_BLOCK):
        block = min(RESAMPLE_BLOCK, n_resamples - start)
        rows.extend(rng.integers(0, n_problems, size=(block, n_problems)))
    return rows


# --------------------------------------------------------------------------------------------------
# means


def test_resampled_means_match_a_plain_resampling_loop():
    rng = np.random.default_rng(3)
    values = rng.random((13, 3))
    n_resamples = RESAMPLE_BLOCK + 7  # two blocks, the second one partial
    got = resampled_means(values, n_resamples, seed=42)
    want = np.array([values[idx].mean(axis=0) for idx in naive_resampled_indices(13, n_resamples, 42)])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    assert resampled_means(values[:, 0], 50, seed=1).shape == (50,)


def test_bootstrap_mean_ci_basics_and_reproducibility():
    rng = np.random.default_rng(0)
    values = rng.random((200, 4))
    ci = bootstrap_mean_ci(values, n_resamples=2000, seed=7)
    np.testing.assert_allclose(ci.estimate, values.mean(axis=0), rtol=1e-14)
    assert np.all(ci.low < ci.estimate) and np.all(ci.estimate < ci.high)
    assert (ci.seed, ci.n_resamples, ci.confidence) == (7, 2000, 0.95)
    # the interval is the percentile interval of the resampled means
    means = resampled_means(values, 2000, seed=7)
    np.testing.assert_allclose(ci.low, np.quantile(means, 0.025, axis=0))
    np.testing.assert_allclose(ci.high, np.quantile(means, 0.975, axis=0))
    # reproducible; the columns of one call see the same resamples as separate calls
    again = bootstrap_mean_ci(values, n_resamples=2000, seed=7)
    assert np.array_equal(again.low, ci.low) and np.array_equal(again.high, ci.high)
    single = bootstrap_mean_ci(values[:, 2], n_resamples=2000, seed=7)
    assert isinstance(single.low, float)  # same resamples; the sums may differ in the last bit (BLAS order)
    assert single.low == pytest.approx(ci.low[2], rel=1e-13) and single.high == pytest.approx(ci.high[2], rel=1e-13)
    other = bootstrap_mean_ci(values, n_resamples=2000, seed=8)
    assert not np.array_equal(other.low, ci.low)
    # a wider confidence gives a wider interval
    wide = bootstrap_mean_ci(values, n_resamples=2000, seed=7, confidence=0.99)
    assert np.all(wide.low <= ci.low) and np.all(wide.high >= ci.high)
    assert json.loads(json.dumps(ci.to_dict()))["low"] == ci.low.tolist()


def test_bootstrap_edge_cases():
    one = bootstrap_mean_ci([0.25], n_resamples=100)  # one problem: every resample is that problem
    assert (one.estimate, one.low, one.high) == (0.25, 0.25, 0.25)
    same = bootstrap_mean_ci(np.full(30, 0.5), n_resamples=100)  # no spread between problems
    assert same.low == pytest.approx(0.5) and same.high == pytest.approx(0.5)
    zeros = bootstrap_mean_ci(np.zeros(30), n_resamples=100)  # c = 0 everywhere
    assert (zeros.estimate, zeros.low, zeros.high) == (0.0, 0.0, 0.0)
    for bad, match in [([], "no problems"), ([[[1.0]]], "1-D"), ([0.5, np.nan], "non-finite")]:
        with pytest.raises(ValueError, match=match):
            bootstrap_mean_ci(bad)
    with pytest.raises(ValueError, match="n_resamples must be >= 1"):
        bootstrap_mean_ci([1.0], n_resamples=0)
    with pytest.raises(TypeError, match="seed must be an integer"):
        bootstrap_mean_ci([1.0], seed=None)
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_mean_ci([1.0], confidence=95)


def test_bootstrap_coverage_of_a_known_mean():
    """Problems whose pass@1 is Bernoulli(0.3) (solved or not): the 95% interval should hold 0.3 ~95% of the time."""
    rng = np.random.default_rng(2024)
    trials, n_problems = 400, 120
    covered = 0
    for trial in range(trials):
        values = (rng.random(n_problems) < 0.3).astype(float)
        ci = bootstrap_mean_ci(values, n_resamples=1000, seed=trial)
        covered += ci.low <= 0.3 <= ci.high
    assert 0.91 <= covered / trials <= 0.98, covered / trials


def test_paired_difference_coverage_and_pairing():
    """Model B = model A plus a per-problem gain of mean 0.05; problems differ a lot in difficulty, which pairing
    removes: the paired interval covers 0.05 ~95% of the time and is much narrower than an unpaired one."""
    rng = np.random.default_rng(99)
    trials, n_problems = 300, 100
    covered, widths_paired, widths_unpaired = 0, [], []
    for trial in range(trials):
        difficulty = rng.random(n_problems)
        a = difficulty
        b = difficulty + 0.05 + rng.normal(0, 0.05, n_problems)
        ci = bootstrap_paired_difference_ci(b, a, n_resamples=1000, seed=trial)
        assert ci.estimate == pytest.approx(b.mean() - a.mean())
        covered += ci.low <= 0.05 <= ci.high
        widths_paired.append(ci.high - ci.low)
        # unpaired: each model's problems resampled independently
        diff = resampled_means(b, 1000, seed=trial) - resampled_means(a, 1000, seed=trial + 10_000)
        widths_unpaired.append(np.quantile(diff, 0.975) - np.quantile(diff, 0.025))
    assert 0.91 <= covered / trials <= 0.98, covered / trials
    assert np.median(widths_paired) < 0.3 * np.median(widths_unpaired)
    with pytest.raises(ValueError, match="same problems"):
        bootstrap_paired_difference_ci([0.1, 0.2], [0.1, 0.2, 0.3])


# --------------------------------------------------------------------------------------------------
# crossover


def plain_crossover(a_means: np.ndarray, b_means: np.ndarray, leader: str) -> int | None:
    """Index of the first k where the trailer's mean reaches the leader's, by a loop."""
    lead, trail = (a_means, b_means) if leader == "a" else (b_means, a_means)
    for i in range(len(lead)):
        if trail[i] >= lead[i]:
            return i
    return None


def test_crossover_hand_worked():
    ks = [1, 2, 4, 8]
    # A: strong at k=1, flat; B: weak at k=1, grows: B catches up at k=4 on every problem
    a = np.tile([0.6, 0.7, 0.75, 0.8], (5, 1))
    b = np.tile([0.3, 0.5, 0.75, 0.95], (5, 1))
    result = crossover_k(a, b, ks, n_resamples=200)
    assert (result.k, result.leader, result.low, result.high) == (4, "a", 4, 4)
    assert result.no_crossover_share == 0.0 and (result.seed, result.n_resamples) == (0, 200)
    assert json.loads(json.dumps(result.to_dict()))["k"] == 4
    # the roles swap with the arguments
    swapped = crossover_k(b, a, ks, n_resamples=200)
    assert (swapped.k, swapped.leader) == (4, "b")
    # never caught within ks (k <= n): None
    assert crossover_k(a, np.tile([0.3, 0.4, 0.5, 0.6], (5, 1)), ks) is None
    # equal at the first k: nobody leads, no crossover
    assert crossover_k(a, np.tile([0.6, 0.9, 0.9, 0.9], (5, 1)), ks) is None
    # one problem: every resample is that problem
    one = crossover_k(a[:1], b[:1], ks, n_resamples=50)
    assert (one.k, one.low, one.high) == (4, 4, 4)


def test_crossover_interval_matches_a_plain_loop():
    rng = np.random.default_rng(5)
    ks = [1, 2, 4, 8, 16, 32]
    n_problems = 40
    # A (peaked, e.g. after RL) leads at k = 1; B (diverse) gains faster; per-problem noise makes the
    # crossover uncertain, and some resamples never cross
    a = np.clip(np.linspace(0.50, 0.62, 6) + rng.normal(0, 0.15, (n_problems, 6)), 0, 1)
    b = np.clip(np.linspace(0.40, 0.64, 6) + rng.normal(0, 0.15, (n_problems, 6)), 0, 1)
    result = crossover_k(a, b, ks, n_resamples=3000, seed=11)
    leader = "a" if a.mean(0)[0] > b.mean(0)[0] else "b"
    assert result.leader == leader
    assert result.k == ks[plain_crossover(a.mean(0), b.mean(0), leader)]
    found = []
    for idx in naive_resampled_indices(n_problems, 3000, 11):
        found.append(plain_crossover(a[idx].mean(0), b[idx].mean(0), leader))
    order = sorted(len(ks) if f is None else f for f in found)
    low_i, high_i = order[int(np.ceil(0.025 * 3000)) - 1], order[int(np.ceil(0.975 * 3000)) - 1]
    assert result.low == (ks[low_i] if low_i < len(ks) else None)
    assert result.high == (ks[high_i] if high_i < len(ks) else None)
    assert result.no_crossover_share == pytest.approx(sum(f is None for f in found) / 3000)
    assert result.low is not None and result.low <= result.k


def test_crossover_validation():
    a = np.full((3, 2), 0.5)
    with pytest.raises(ValueError, match=r"shape \(problems, len\(ks\)\)"):
        crossover_k(a, a, [1, 2, 4])
    with pytest.raises(ValueError, match="strictly increasing"):
        crossover_k(a, a, [2, 1])
    with pytest.raises(ValueError, match="integers >= 1"):
        crossover_k(a, a, [0, 1])
    with pytest.raises(ValueError, match="same problems"):
        crossover_k(a, a[:2], [1, 2])


# --------------------------------------------------------------------------------------------------
# solved-set overlap


def test_solved_overlap():
    a = np.array([[0.9, 1.0], [0.5, 0.8], [0.1, 0.6], [0.0, 0.2]])
    b = np.array([[0.2, 0.7], [0.6, 0.9], [0.49, 0.5], [0.0, 0.0]])
    got = solved_overlap(a, b)  # solved: pass@k >= 0.5 (0.5 itself counts)
    assert [x.tolist() for x in got] == [[1, 3], [1, 0], [0, 0], [2, 1]]
    for column in range(2):
        single = solved_overlap(a[:, column], b[:, column])
        assert single == tuple(int(x[column]) for x in got)
        assert sum(single) == 4
    # a plain loop on random data, with another threshold
    rng = np.random.default_rng(1)
    a, b = rng.random((50, 3)), rng.random((50, 3))
    got = solved_overlap(a, b, threshold=0.7)
    for column in range(3):
        pairs = [(a[p, column] >= 0.7, b[p, column] >= 0.7) for p in range(50)]
        want = [pairs.count((True, True)), pairs.count((True, False)), pairs.count((False, True))]
        want.append(pairs.count((False, False)))
        assert [int(x[column]) for x in got] == want
    with pytest.raises(ValueError, match="threshold"):
        solved_overlap(a, b, threshold=0.0)


def test_runs_and_problems_interval_against_a_plain_loop_and_its_one_run_case():
    """The two-level bootstrap (training runs, then problems) against a loop over resamples with the documented
    draws; with one run per model it is the problems-only interval, and seeds that disagree widen it."""
    rng = np.random.default_rng(5)
    a = rng.random((3, 40))
    b = rng.random((2, 40))
    got = bootstrap_runs_and_problems_ci(a, b, n_resamples=1500, seed=7)
    problem_rows = naive_resampled_indices(40, 1500, 7)
    run_rng = np.random.default_rng([7, 1])
    means = []
    for start in range(0, 1500, RESAMPLE_BLOCK):
        block = min(RESAMPLE_BLOCK, 1500 - start)
        runs_a, runs_b = run_rng.integers(0, 3, size=(block, 3)), run_rng.integers(0, 2, size=(block, 2))
        for i in range(block):
            problems = problem_rows[start + i]
            means.append(a[runs_a[i]][:, problems].mean() - b[runs_b[i]][:, problems].mean())
    low, high = np.quantile(means, [0.025, 0.975])
    assert (got.estimate, got.low, got.high) == pytest.approx((a.mean() - b.mean(), low, high))

    one = bootstrap_runs_and_problems_ci(a[:1], b[:1], n_resamples=2000, seed=3)
    paired = bootstrap_paired_difference_ci(a[0], b[0], n_resamples=2000, seed=3)
    assert (one.low, one.high) == pytest.approx((paired.low, paired.high))
    alone = bootstrap_runs_and_problems_ci(a[0], n_resamples=2000, seed=3)
    problems_only = bootstrap_mean_ci(a[0], 2000, 3)
    assert (alone.low, alone.high) == pytest.approx((problems_only.low, problems_only.high))

    # three seeds alike: as one run; three seeds far apart (0.1, 0.3, 0.5 on every problem): the run level shows
    alike = bootstrap_runs_and_problems_ci(np.stack([a[0]] * 3), n_resamples=2000, seed=3)
    assert (alike.low, alike.high) == pytest.approx((alone.low, alone.high))
    apart = np.stack([np.full(40, v) for v in (0.1, 0.3, 0.5)])
    spread = bootstrap_runs_and_problems_ci(apart, n_resamples=2000, seed=3)
    problems_only = bootstrap_mean_ci(apart.mean(axis=0), 2000, 3)
    assert (problems_only.low, problems_only.high) == pytest.approx((0.3, 0.3))  # every problem alike: no noise
    assert spread.low < 0.2 and spread.high > 0.4  # the seeds' spread: means of 3 draws from {0.1, 0.3, 0.5}
    with pytest.raises(ValueError, match="same problems"):
        bootstrap_runs_and_problems_ci(a, b[:, :10])
