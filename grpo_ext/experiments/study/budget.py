"""What a study costs before it runs: every run it will train and every evaluation it will draw, priced at planning
rates measured on the machine (the study's ``budget`` section), in core-seconds.

    budget:
      core_hours: 12                    # the limit (tests/experiments/study/test_real_study.py: the shipped study fits)
      seconds_per_sequence: {online: 2.3, sft: 1.8, rft: 1.8, dpo: 2.4}   # one trained sequence, one core
      eval_samples_per_second: {trained: 15, base: 9}                     # one core
      # or by samples a prompt: {trained: {4: 4.3, 16: 8.6, 64: 14.6}, base: 9}

``seconds_per_sequence[runner]``: a trained sequence's forward and backward (the online runners' generation of it
included; a DPO pair is two sequences, its reference forward included). ``eval_samples_per_second``: the harness's
sampling rate for a trained model (``trained``: short answers that end) and for the base (``base``: it also prices the
RFT / DPO draws from the base); either one rate or rates by ``n`` (samples a prompt: the sampler draws a prompt's
samples together, so a sample costs less at a larger ``n``), an evaluation at ``n`` priced at the listed ``n`` nearest
below it (the smallest listed above it where none is below). Jobs run one core each, so core-seconds add up whatever
``--jobs`` is; the wall time is about the total divided by the jobs. Pure: reads the method configs, runs nothing.
"""

from __future__ import annotations

from pathlib import Path

from grpo_ext.errors import UserError, read_yaml
from grpo_ext.experiments.study.method_configs import method_config_path
from grpo_ext.experiments.study.spec import Study
from grpo_ext.methods import paradigm
from grpo_ext.methods.paradigm import Method, get_method
from grpo_ext.report_format import fmt, md_header, md_row

__all__ = ["estimate", "eval_rate", "render_estimate"]


def eval_rate(rate, n: int) -> float:
    """Samples a second at ``n`` samples a prompt from a budget rate: one number, or ``{n: rate}`` (see the module
    docstring)."""
    if not isinstance(rate, dict):
        return float(rate)
    by_n = {int(k): float(v) for k, v in rate.items()}
    below = [k for k in by_n if k <= n]
    return by_n[max(below)] if below else by_n[min(by_n)]


def _check_rate(name: str, rate) -> None:
    values = list(rate.values()) if isinstance(rate, dict) else [rate]
    keys = list(rate) if isinstance(rate, dict) else []
    ok = values and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in values)
    ok = ok and all(str(k).isdigit() and int(k) > 0 for k in keys)
    if not ok:
        raise UserError(f"study budget: {name} must be a positive rate or {{n: rate}} with n > 0, got {rate!r}")


def _rates(study: Study, rates: dict | None = None) -> tuple[dict, dict]:
    budget = rates if rates is not None else (study.budget or {})
    per_sequence = budget.get("seconds_per_sequence") or {}
    sampling = budget.get("eval_samples_per_second") or {}
    # the paradigm's runners, each once, in its order (read at call time: a method registered later is priced too)
    runners = dict.fromkeys(m.runner for m in paradigm.METHODS.values())
    missing = [f"seconds_per_sequence.{r}" for r in runners if r not in per_sequence]
    missing += [f"eval_samples_per_second.{k}" for k in ("trained", "base") if k not in sampling]
    if missing:
        raise UserError(f"study budget: missing {', '.join(missing)} (the planning rates of the estimate)")
    for key in ("trained", "base"):
        _check_rate(f"eval_samples_per_second.{key}", sampling[key])
    return per_sequence, sampling


def _training_seconds(config: dict, method: Method, per_sequence: dict, sampling: dict) -> dict:
    """One training run: its steps, sequences, draw and learning-curve evaluations, priced (``sampling["draw"]``: the
    rate of the model RFT / DPO draw from, the study's start or its base)."""
    steps = int(config["max_steps"])
    sequences = int(config["per_device_train_batch_size"]) * int(config.get("gradient_accumulation_steps", 1))
    sequences *= method.sequences_per_example  # a DPO pair is two sequences
    seconds = steps * sequences * per_sequence[method.runner]
    drawn = int(config["train_size"]) * int(config.get("samples_per_prompt", 8)) if method.draws_from_base else 0
    seconds += drawn / eval_rate(sampling["draw"], int(config.get("samples_per_prompt", 8)))
    every = int(config.get("curve_every", 0))
    if every > 0:
        points = steps // every + 1  # the first point is at step 0 (eval_on_start)
        curve_n = int(config.get("curve_n", 8))
        seconds += points * int(config.get("curve_prompts", 64)) * curve_n / eval_rate(sampling["trained"], curve_n)
    return {"steps": steps, "sequences_per_step": sequences, "drawn": drawn, "seconds": seconds}


def _eval_seconds(evaluation, name: str, rate) -> float:
    """One evaluation of ``name`` (its ``limit`` problems x its ``n``), priced."""
    n = evaluation.n_for(name)
    return evaluation.limit * n / eval_rate(rate, n)


def estimate(study: Study, rates: dict | None = None) -> dict:
    """The study's cost: one row per kind of work (``what``, ``runs``, ``core_seconds``) and the total in core-hours,
    with the limit (``budget.core_hours``) beside it. ``rates``: other rates than the study's ``budget`` section, in
    its form (:func:`.spent.measured_rates` gives the ones a study's runs measured)."""
    per_sequence, sampling = _rates(study, rates)
    # with a start, the base (the start) answers briefly as a trained model does; the raw base rambles to the cap
    reference_rate = sampling["trained"] if study.start is not None else sampling["base"]
    sampling = {**sampling, "draw": reference_rate}
    rows = []
    if study.start is not None:
        path = method_config_path(study.start.method, study.configs_dir)
        config = {**(read_yaml(path, "method config") or {}), **study.start.overrides}
        train = _training_seconds(config, get_method(study.start.method), per_sequence, sampling)
        rows.append(
            {"what": f"start ({study.start.label})", "steps": train["steps"],
             "sequences_per_step": train["sequences_per_step"], "runs": 1, "train_core_seconds": train["seconds"],
             "eval_core_seconds": 0.0}
        )  # fmt: skip
    configs = {}
    for arm in study.arms:
        path: Path = method_config_path(arm.method, study.configs_dir)
        configs[arm.name] = {**(read_yaml(path, "method config") or {}), **arm.overrides}
    for arm in study.arms:
        method = get_method(arm.method)
        # search runs: every setting of its grid x every search seed (a rate_of arm: one learning rate, its
        # reference's pick); a grid of one setting is not searched (Study.search)
        settings = len(arm.settings(study.learning_rates[:1] if arm.rate_of else study.learning_rates))
        runs_search = settings * len(study.search_seeds) if settings > 1 else 0
        train = _training_seconds(configs[arm.name], method, per_sequence, sampling)
        val = _eval_seconds(study.validation, arm.name, sampling["trained"])
        test = _eval_seconds(study.test, arm.name, sampling["trained"])
        runs_test = len(study.seeds)
        rows.append(
            {
                "what": f"{arm.name} ({method.runner})",
                "steps": train["steps"],
                "sequences_per_step": train["sequences_per_step"],
                "runs": runs_search + runs_test,
                "train_core_seconds": (runs_search + runs_test) * train["seconds"],
                "eval_core_seconds": runs_search * val + runs_test * test,
            }
        )
    raw = {b.name for b in study.baselines if b.raw_base or study.start is None}
    for name in ["base", *(b.name for b in study.baselines)]:
        rate = sampling["base"] if name in raw else reference_rate
        seconds = _eval_seconds(study.validation, name, rate) + _eval_seconds(study.test, name, rate)
        label = study.reference_label if name == "base" else name
        rows.append(
            {"what": f"{label} (no training)", "steps": 0, "sequences_per_step": 0, "runs": 1,
             "train_core_seconds": 0.0, "eval_core_seconds": seconds}
        )  # fmt: skip
    total = sum(r["train_core_seconds"] + r["eval_core_seconds"] for r in rows)
    limit = (study.budget or {}).get("core_hours")
    return {"rows": rows, "core_hours": total / 3600, "limit_core_hours": limit, "rates": study.budget}


def render_estimate(result: dict) -> str:
    """The estimate as a Markdown table (what ``run_methods.py --estimate`` prints)."""
    lines = md_header(["what", "steps x sequences", "runs", "training core-h", "evaluation core-h"], "llrrr")
    for r in result["rows"]:
        hours = [fmt(r[f"{part}_core_seconds"] / 3600, 2) for part in ("train", "eval")]
        lines.append(md_row([r["what"], f"{r['steps']} x {r['sequences_per_step']}", r["runs"], *hours]))
    limit = result["limit_core_hours"]
    verdict = "" if limit is None else (" (fits)" if result["core_hours"] <= limit else " (**over**)")
    lines.append(f"\nTotal: {result['core_hours']:.1f} core-hours; limit {limit}{verdict}")
    return "\n".join(lines)
