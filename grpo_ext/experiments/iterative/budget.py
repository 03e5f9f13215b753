"""What an iterative experiment costs before it runs (``scripts/iterative.py --estimate``), and what it spent.

Every piece of work of :mod:`grpo_ext.experiments.iterative.loop` and
:mod:`~grpo_ext.experiments.iterative.iteration_zero`, counted from the settings and priced at the planning rates of the
config's ``budget`` section (one core; measured on the machine)::

    budget:
      core_hours: 12                 # the limit
      grpo_seconds_per_sequence: 1.1 # one GRPO sample: generated, scored by the verifier, forward and backward
      rm_seconds_per_record: 1.1     # one RM record, one training epoch
      rm_scores_per_second: 4        # records (or GRPO samples) a reward model scores a second
      sampling_seconds_per_prompt: 0.86    # policy sampling (the harness, the RM's data and measurement sets):
      sampling_seconds_per_sample: 0.0066  #   a prompt's fixed cost (its prefill) + each sample's

Sampling is priced by prompt and by sample, not by sample alone: on a CPU a prompt's prefill costs about as much as
all its samples' decoding (a confident model's samples share their rows until they differ). Measured on the SFT
study's start (fp32, one thread): 2.3 / 4.9 / 9.7 / 16.8 / ~50 samples a second at n = 2 / 4 / 8 / 16 / 64, i.e.
0.87 / 0.82 / 0.82 / 0.95 / 1.28 s a prompt: one rate a sample would misprice n = 2 against n = 8 by 4x.

Jobs run one core each, so core-seconds add up whatever ``workers`` is; the wall time is about the total divided by
the workers. Pure: reads the parsed settings, runs nothing. The spend is read from the saved rows (each row's
``seconds``, one core each).
"""

from __future__ import annotations

import math

from grpo_ext.errors import UserError
from grpo_ext.experiments.iterative.arms import RETRAINS_RM, USES_RM
from grpo_ext.report_format import fmt, md_header, md_row

__all__ = ["RATES", "estimate", "render_estimate", "spent_core_hours"]

#: The planning rates a budget section must give.
RATES = (
    "grpo_seconds_per_sequence",
    "rm_seconds_per_record",
    "rm_scores_per_second",
    "sampling_seconds_per_prompt",
    "sampling_seconds_per_sample",
)


def _rates(it_args) -> dict:
    budget = it_args.budget or {}
    missing = [f"budget.{name}" for name in RATES if name not in budget]
    if missing:
        raise UserError(f"{', '.join(missing)}: missing (the planning rates of --estimate)")
    for name in RATES:
        value = budget[name]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (value > 0 and math.isfinite(value)):
            raise UserError(f"budget.{name}: must be a number > 0, got {value!r}")
    return budget


def _records(it_args, pool_size: int) -> int:
    """RM records drawn per iteration: ``rm_prompts`` (at most the pool) x ``rm_samples_per_prompt``."""
    return min(it_args.rm_prompts, pool_size) * it_args.rm_samples_per_prompt


def _measurement_prompts(it_args, pool_size: int) -> int:
    """Prompts of the fresh samples the RM is measured on per iteration (pool and held-out sets)."""
    return min(it_args.rm_eval_prompts, pool_size) + it_args.rm_heldout_prompts


def _sampling_seconds(rates: dict, prompts: int, samples: int) -> float:
    return prompts * rates["sampling_seconds_per_prompt"] + samples * rates["sampling_seconds_per_sample"]


def estimate(it_args, training_args, pool_size: int | None = None) -> dict:
    """The experiment's cost: one row per kind of run (``what``, ``runs``, the core-seconds of each part) and the
    total in core-hours beside the limit (``budget.core_hours``). ``pool_size``: the RL prompt pool as the task
    gives it (default ``train_size``)."""
    rates = _rates(it_args)
    pool = pool_size if pool_size is not None else int(it_args.train_size or 0)
    seeds = len(it_args.seed_list) if it_args.seed_list is not None else 1
    k, iterations = it_args.eval_samples, it_args.iterations
    samples_per_step = int(training_args.per_device_train_batch_size) * int(training_args.gradient_accumulation_steps)
    steps = int(training_args.max_steps)
    grpo_samples = steps * samples_per_step
    records, measured_prompts = _records(it_args, pool), _measurement_prompts(it_args, pool)
    measured = measured_prompts * it_args.rm_eval_samples_per_prompt
    test = _sampling_seconds(rates, it_args.eval_prompts, it_args.eval_prompts * k)
    sampling = _sampling_seconds(rates, measured_prompts, measured)
    rm_data = _sampling_seconds(rates, min(it_args.rm_prompts, pool), records)
    score_measured = measured / rates["rm_scores_per_second"]
    new_records = records + math.floor(it_args.replay_ratio * records + 0.5)

    def row(what, runs, grpo=0.0, rm_train=0.0, rm_score=0.0, sample=0.0, evaluate=0.0) -> dict:
        parts = {"grpo": grpo, "rm_train": rm_train, "rm_score": rm_score, "sampling": sample, "test": evaluate}
        return {"what": what, "runs": runs, **{f"{p}_core_seconds": runs * v for p, v in parts.items()}}

    initial_epochs = it_args.rm_initial_epochs or it_args.rm_epochs
    rows = [
        row(
            "iteration 0 (per seed: the start's samples, RM_0, the start on test)",
            seeds,
            rm_train=records * initial_epochs * rates["rm_seconds_per_record"],
            rm_score=2 * score_measured,  # the untrained RM and RM_0
            sample=rm_data + sampling,
            evaluate=test,
        )
    ]
    for arm in it_args.arm_list:
        uses_rm, retrains = arm in USES_RM, arm in RETRAINS_RM
        grpo = grpo_samples * rates["grpo_seconds_per_sequence"]
        rm_score = (grpo_samples / rates["rm_scores_per_second"] + score_measured) if uses_rm else 0.0
        rm_train = new_records * it_args.rm_epochs * rates["rm_seconds_per_record"] if retrains else 0.0
        sample = sampling + (rm_data if retrains else 0.0)
        rm_score += score_measured if retrains else 0.0  # the updated RM, measured again
        what = f"{arm} ({iterations} iterations x {steps} steps x {samples_per_step} samples)"
        rows.append(row(what, seeds * iterations, grpo, rm_train, rm_score, sample, test))
    total = sum(v for r in rows for key, v in r.items() if key.endswith("_core_seconds"))
    return {
        "rows": rows,
        "core_hours": total / 3600,
        "limit_core_hours": (it_args.budget or {}).get("core_hours"),
        "rates": {name: rates[name] for name in RATES},
        "seeds": seeds,
        "grpo_samples_per_run": grpo_samples * iterations,
    }


_PARTS = ("grpo", "rm_train", "rm_score", "sampling", "test")


def render_estimate(result: dict, spent: float | None = None) -> str:
    """The estimate as a Markdown table (what ``--estimate`` prints), with the measured spend when given."""
    lines = md_header(["what", "runs", *(f"{p} core-h" for p in _PARTS), "total core-h"], "lr" + "r" * 6)
    for r in result["rows"]:
        hours = [r[f"{p}_core_seconds"] / 3600 for p in _PARTS]
        lines.append(md_row([r["what"], r["runs"], *(fmt(h, 2) for h in hours), fmt(sum(hours), 2)]))
    limit = result["limit_core_hours"]
    verdict = "" if limit is None else (" (fits)" if result["core_hours"] <= limit else " (**over**)")
    lines.append(f"\nTotal: {result['core_hours']:.1f} core-hours; limit {limit}{verdict}")
    if spent is not None:
        lines.append(f"Spent so far (the saved iterations' measured seconds, one core each): {spent:.2f} core-hours")
    return "\n".join(lines)


def spent_core_hours(states: dict) -> float:
    """Core-hours of every saved iteration of ``{arm: {seed: state}}`` (each job one core); a seed's iteration 0,
    shared by its arms, is counted once."""
    seconds, starts = 0.0, set()
    for runs in states.values():
        for seed, state in runs.items():
            for row in state["history"]:
                if row["iteration"] == 0:
                    if seed in starts:
                        continue
                    starts.add(seed)
                seconds += float(row.get("seconds") or 0.0)
    return seconds / 3600
