"""The experiment scored as the study scores its arms: the config's expectations, every arm against the start per
iteration and per operation, and the anatomy of the last iteration's samples. Nothing new is computed here: the
numbers are the study's (:mod:`grpo_ext.experiments.study.stats`, :mod:`~grpo_ext.experiments.study.expectations`) and
the harness's (:mod:`grpo_ext.evaluation.failures`), fed with the test results each iteration keeps
(:func:`grpo_ext.experiments.iterative.measure.compact_result`).

The start (``base`` in the expectations) is one model scored once per seed at iteration 0 with that seed's sampling
seed; its seeds' results are pooled into one result of ``k x seeds`` samples a problem (:func:`pooled`), the single
run every arm's seeds are paired against, as the study pairs its arms with its base.
"""

from __future__ import annotations

import numpy as np

from grpo_ext.evaluation.registry import MAJ_AT_K, PASS_AT_1

__all__ = ["findings", "pooled", "render_findings"]


def _results(states: dict, arm: str, iteration: int | None) -> list[dict]:
    """``arm``'s test results at ``iteration`` (None: each seed's last), seeds in order; only seeds that have one."""
    out = []
    for _, state in sorted(states.get(arm, {}).items()):
        rows = state["history"]
        row = rows[-1] if iteration is None else next((r for r in rows if r["iteration"] == iteration), None)
        if row is not None and "test_result" in row:
            out.append(row["test_result"])
    return out


def pooled(results: list[dict]) -> dict | None:
    """One result of the same model's runs (the start at each seed's iteration 0): right counts and samples summed,
    each problem's maj@k the mean of the runs', the anatomy's counts summed."""
    if not results:
        return None
    from grpo_ext.evaluation.failures import add_counts

    by_id = [{p["problem_id"]: p for p in r["per_problem"]} for r in results]
    problems = []
    for pid, first in by_id[0].items():
        records = [runs[pid] for runs in by_id if pid in runs]
        if len(records) != len(results):
            continue  # scored in some runs only: not comparable
        majs = MAJ_AT_K.name  # each record's exact maj@k per k, averaged over the runs
        maj = {k: float(np.mean([r[majs][k] for r in records])) for k in first.get(majs, {})}
        entry = {**first, "n_correct": sum(int(r["n_correct"]) for r in records), majs: maj}
        if all("anatomy" in r for r in records):
            entry["anatomy"] = add_counts(r["anatomy"] for r in records)
        problems.append(entry)
    return {"n": sum(int(r["n"]) for r in results), "per_problem": problems}


def _against_start(results: list[dict], start: dict | None, metric: str = PASS_AT_1) -> dict | None:
    from grpo_ext.experiments.study.stats import paired_difference

    if not results or start is None:
        return None
    return paired_difference(results, [start], metric)


def findings(states: dict, arms: list[str], it_args) -> dict:
    """``expectations`` (the study's judged rows), ``per_iteration`` (arm -> one difference from the start per
    iteration, pass@1, paired by problem, over the seeds that reached it), ``per_operation`` (arm -> operation ->
    the last iteration's difference from the start) and ``anatomy`` (the start's and each arm's last iteration,
    seeds pooled)."""
    from grpo_ext.evaluation.failures import summarize_anatomy
    from grpo_ext.experiments.study.expectations import (
        judge_expectations,
        parse_expectations,
        slice_results,
        slice_values,
    )

    k = it_args.eval_samples
    start = pooled(_start_results(states, arms))
    last = {arm: _results(states, arm, None) for arm in arms}
    spec = parse_expectations(it_args.expectations, arms, sorted({1, k}), "expectations")
    out: dict = {"expectations": judge_expectations(spec, {a: r for a, r in last.items() if r}, start)}
    depth = max((len(s["history"]) for runs in states.values() for s in runs.values()), default=0)
    out["per_iteration"] = {
        arm: [_against_start(_results(states, arm, i), start) for i in range(1, depth)] for arm in arms
    }
    per_operation: dict = {}
    if start is not None and all("operation" in (p.get("attributes") or {}) for p in start["per_problem"]):
        for arm in arms:
            if last[arm]:
                per_operation[arm] = {
                    value: _against_start(
                        slice_results(last[arm], "operation", value), slice_results([start], "operation", value)[0]
                    )
                    for value in slice_values([start], "operation")
                }
    out["per_operation"] = per_operation
    anatomy = {}
    for name, result in [("start", start), *((arm, pooled(last[arm])) for arm in arms)]:
        records = [p["anatomy"] for p in (result or {}).get("per_problem", []) if "anatomy" in p]
        if records:
            anatomy[name] = summarize_anatomy(records)
    out["anatomy"] = anatomy
    return out


def _start_results(states: dict, arms: list[str]) -> list[dict]:
    """Each seed's iteration-0 test result once (every arm of a seed holds the same one), seeds in order."""
    by_seed: dict = {}
    for arm in arms:
        for seed, state in states.get(arm, {}).items():
            first = state["history"][0]
            if first["iteration"] == 0 and "test_result" in first:
                by_seed.setdefault(seed, first["test_result"])
    return [by_seed[seed] for seed in sorted(by_seed)]


def render_findings(found: dict, task=None) -> list[str]:
    """The report's sections for :func:`findings` (markdown lines)."""
    from grpo_ext.evaluation.failures import anatomy_legend, anatomy_markdown
    from grpo_ext.experiments.study.expectations import render_expectations
    from grpo_ext.report_format import md_header, md_row, signed_with_seeds

    lines = render_expectations(found["expectations"], reference_label="SFT start")
    lines[0] = "## Expectations (written in the config before the run)"
    per_iteration = found["per_iteration"]
    depth = max((len(v) for v in per_iteration.values()), default=0)
    lines += [
        "## Every arm against the start per iteration: test pass@1 difference [95% interval] (seeds)",
        "",
        "Paired by problem against the start (its seeds' iteration-0 samples pooled); the interval resamples the "
        "problems, the seeds' own differences in brackets.",
        "",
        *md_header(["arm", *(f"iteration {i}" for i in range(1, depth + 1))], "l" + "r" * depth),
    ]
    for arm, diffs in per_iteration.items():
        lines.append(md_row([arm, *(signed_with_seeds(d) if d else "–" for d in diffs)]))
    lines.append("")
    if found["per_operation"]:
        operations = sorted({op for ops in found["per_operation"].values() for op in ops})
        lines += [
            "## Per operation: the last iteration against the start, test pass@1",
            "",
            *md_header(["arm", *operations], "l" + "r" * len(operations)),
        ]
        for arm, ops in found["per_operation"].items():
            lines.append(md_row([arm, *(signed_with_seeds(ops[op]) if ops.get(op) else "–" for op in operations)]))
        lines.append("")
    if found["anatomy"]:
        lines += [
            "## Anatomy of the test samples: the start and each arm's last iteration (seeds pooled)",
            "",
            *anatomy_markdown(found["anatomy"], label="model"),
            "",
            *(
                anatomy_legend(getattr(task, "strict_form", None), getattr(task, "has_step_verifier", True))
                if task
                else []
            ),
            "",
        ]
    return lines
