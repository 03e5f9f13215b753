"""`process_advantages` on N = 4096 sequences x T = 1024 tokens, ~16 steps each, one thread, against a
straightforward per-sequence Python loop of the same formula (the reference is checked equal first).

    python -m benchmarks.advantages [--reps 21] [--ref-reps 5]

Target: median <= 50 ms. The speed-up over the loop is reported.
"""

from __future__ import annotations

import argparse
import time

import torch

from benchmarks import _common
from grpo_ext.advantages import process_advantages

TARGET_MS = 50.0


def make_step_rewards(n: int, t: int, steps: int, group_size: int, seed: int = 0) -> torch.Tensor:
    """(N, T) NaN tensor with ~`steps` step ends per row (12-20), inside a random completion length, rewards 0/1
    plus a little noise (graded step scores as a PRM would give)."""
    g = torch.Generator().manual_seed(seed)
    out = torch.full((n, t), float("nan"))
    lengths = torch.randint(t // 4, t + 1, (n,), generator=g)
    counts = torch.randint(max(1, steps - 4), steps + 5, (n,), generator=g)
    for i in range(n):
        length, k = int(lengths[i]), int(counts[i])
        ends = torch.randperm(length, generator=g)[:k]
        out[i, ends] = (torch.rand(k, generator=g) < 0.6).float() + 0.1 * torch.rand(k, generator=g)
    return out


def reference_process_advantages(step_rewards: torch.Tensor, group_size: int, eps: float = 1e-4) -> torch.Tensor:
    """The formula, one sequence at a time: group statistics over every step of every output of the group, then
    each token gets the sum of the normalised rewards of its row's steps ending at or after it."""
    n, t = step_rewards.shape
    out = torch.zeros(n, t)
    for g0 in range(0, n, group_size):
        rows = []
        for i in range(g0, g0 + group_size):
            ends = torch.nonzero(~torch.isnan(step_rewards[i])).flatten().tolist()
            rows.append((i, ends, [float(step_rewards[i, e]) for e in ends]))
        values = [v for _, _, vs in rows for v in vs]
        if len(values) < 2 or max(values) == min(values):
            continue  # no signal: all zeros
        mean = sum(values) / len(values)
        std = (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5
        for i, ends, vs in rows:
            running, previous_end = 0.0, None
            # walk the steps backwards: a token's advantage is the suffix sum of normalised step rewards
            suffix = []
            for v in reversed(vs):
                running += (v - mean) / (std + eps)
                suffix.append(running)
            suffix.reverse()
            previous_end = -1
            for end, a in zip(ends, suffix, strict=True):
                out[i, previous_end + 1 : end + 1] = a
                previous_end = end
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--t", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--reps", type=int, default=21, help="timed runs of process_advantages")
    parser.add_argument("--ref-reps", type=int, default=5, help="timed runs of the Python loop reference")
    args = parser.parse_args(argv)
    _common.set_threads(1)
    load_start = _common.load_average()

    x = make_step_rewards(args.n, args.t, args.steps, args.group_size)
    steps_per_row = float((~torch.isnan(x)).sum(1).float().mean())
    ours = process_advantages(x, args.group_size)
    ref = reference_process_advantages(x, args.group_size)
    max_abs_diff = float((ours - ref).abs().max())
    assert torch.allclose(ours, ref, atol=1e-4, rtol=1e-4), f"process_advantages != reference (max {max_abs_diff})"

    # Side by side: every repetition runs ours `per_ref` times and the reference once (the loop is ~100x slower).
    per_ref = max(1, round(args.reps / args.ref_reps))
    ours_times: list[tuple[float, float]] = []
    fns = {
        "ours": lambda r: ours_times.extend(_time_many(lambda: process_advantages(x, args.group_size), per_ref)),
        "reference": lambda r: reference_process_advantages(x, args.group_size),
    }
    cpu: dict[str, list[float]] = {}
    times = _common.alternate(fns, reps=args.ref_reps, warmup=1, cpu_times=cpu)
    ours_times = ours_times[per_ref:]  # drop the warm-up round's runs
    ours_s, ref_s = _common.summary([w for w, _ in ours_times]), _common.summary(times["reference"])
    ours_cpu = _common.summary([c for _, c in ours_times])
    ours_ms = ours_s["median"] * 1e3
    speedup = ref_s["median"] / ours_s["median"]
    passed = ours_ms <= TARGET_MS
    load = _common.load_average()
    table = _common.markdown_table(
        ["measure", "value", "target", "result", "load avg (1/5/15 min)"],
        [
            [
                f"process_advantages, N={args.n} T={args.t} ~{steps_per_row:.1f} steps/row, 1 thread, median of "
                f"{len(ours_times)} (IQR)",
                f"{ours_ms:.1f} ms ({ours_s['q1'] * 1e3:.1f}-{ours_s['q3'] * 1e3:.1f}); "
                f"CPU time {ours_cpu['median'] * 1e3:.1f} ms",
                f"<= {TARGET_MS:.0f} ms",
                _common.verdict(passed),
                " / ".join(map(str, load)),
            ],
            [
                f"per-sequence Python loop reference, median of {ref_s['n']}",
                f"{ref_s['median'] * 1e3:.0f} ms",
                "",
                "",
                "",
            ],
            ["speed-up (reference / ours)", f"{speedup:.0f}x", "report", "", ""],
        ],
    )
    payload = {
        "params": vars(args) | {"steps_per_row_mean": steps_per_row},
        "load_average_start": load_start,
        "ours_seconds": ours_s,
        "ours_cpu_seconds": ours_cpu,
        "reference_cpu_seconds": _common.summary(cpu["reference"]),
        "reference_seconds": ref_s,
        "max_abs_diff_vs_reference": max_abs_diff,
        "median_ms": ours_ms,
        "speedup": speedup,
        "target": f"<= {TARGET_MS} ms median",
        "pass": passed,
    }
    _common.write_results("advantages", payload, table)
    return payload


def _time_many(fn, k: int) -> list[tuple[float, float]]:
    """(wall seconds, CPU seconds) of `k` calls."""
    out = []
    for _ in range(k):
        cpu, start = time.process_time(), time.perf_counter()
        fn()
        out.append((time.perf_counter() - start, time.process_time() - cpu))
    return out


def summary_rows() -> list[list]:
    """This benchmark's rows of the `run_all` summary (:func:`benchmarks._common.dated_rows`)."""

    def rows(r):
        n, t = r["params"]["n"], r["params"]["t"]
        measure = f"process_advantages N={n} T={t}, 1 thread ({r['speedup']:.0f}x the Python loop)"
        yield measure, f"{r['median_ms']:.1f} ms", "<= 50 ms", _common.verdict(r["pass"])

    return _common.dated_rows(_common.load_result("advantages"), rows)


if __name__ == "__main__":
    main()
