"""The experiment's combined report: ``report.md`` (tables with intervals), ``report.json`` (every number, the
per-problem values left out) and ``iterative.png`` (the arms per iteration with seed bands, and the hacking gap)."""

from __future__ import annotations

from pathlib import Path

from grpo_ext.evaluation.registry import MAJ_AT_K, PASS_AT_1
from grpo_ext.experiments.iterative.arms import USES_RM
from grpo_ext.experiments.iterative.findings import findings, render_findings
from grpo_ext.experiments.iterative.report import REPORT_JSON, REPORT_MD, REPORT_PNG, report_folder
from grpo_ext.experiments.iterative.summary import TARGET_GAIN, summarize, training_gap_curve
from grpo_ext.io import atomic_write_bytes, atomic_write_json, atomic_write_text, figure_png, portable_path
from grpo_ext.report_format import MISSING, arrow, ci, fmt, md_header, md_row

__all__ = ["plot_arms", "render_arms", "write_experiment_report"]

ARM_STYLE = {"iterative": ("tab:blue", "o-"), "frozen": ("tab:orange", "s-"), "verifier": ("tab:green", "^-")}


def _arrow(entry: dict, key: str) -> str:
    return arrow(entry.get(f"{key}_before"), entry.get(f"{key}_after"))


def _policy_table(summary: dict, metric: str) -> list[str]:
    arms = summary["arms"]
    depth = max((len(s) for runs in arms.values() for s in runs.values()), default=0)
    lines = md_header(["arm", "seed", *(f"iteration {i}" for i in range(depth))], "lr" + "r" * depth)
    for arm, runs in arms.items():
        for seed, series in runs.items():
            cells = [ci(e.get(metric)) for e in series] + [""] * (depth - len(series))
            lines.append(md_row([arm, seed, *cells]))
        mean = summary["means"][arm]
        cells = [fmt(m[metric]["mean"]) if metric in m else MISSING for m in mean] + [""] * (depth - len(mean))
        lines.append(md_row([f"**{arm}**", "mean", *cells]))
    return lines


def _rm_table(summary: dict) -> list[str]:
    lines = md_header(
        [
            "arm",
            "seed",
            "iteration",
            "step AUC, pool (before → after)",
            "step accuracy, pool",
            "step AUC, held-out",
            "outcome AUC (min step), pool",
            "right steps, pool",
            "policy right rate, pool",
        ],
        "lrrllllrr",
    )
    for arm, runs in summary["arms"].items():
        if arm not in USES_RM:
            continue
        for seed, series in runs.items():
            for e in series:
                arrows = [_arrow(e, key) for key in ("rm_auc", "rm_accuracy", "rm_heldout_auc", "rm_outcome_auc")]
                rates = [fmt(e.get(key)) for key in ("rm_positive_rate", "policy_sample_accuracy")]
                lines.append(md_row([arm, seed, e["iteration"], *arrows, *rates]))
    return lines


def _first_last(e: dict, name: str) -> str:
    if f"train_{name}_first" not in e:
        return MISSING
    return f"{fmt(e[f'train_{name}_first'])} → {fmt(e[f'train_{name}_last'])}"


def _hacking_table(summary: dict) -> list[str]:
    lines = md_header(
        [
            "arm",
            "seed",
            "iteration",
            "RM step reward",
            "verifier step reward",
            "RM outcome",
            "verifier outcome",
            "gap (mean over training)",
            "gap (last window)",
            "guard stop",
            "GRPO steps",
        ],
        "lrrllllrrrr",
    )
    for arm, runs in summary["arms"].items():
        for seed, series in runs.items():
            for e in series[1:]:
                rewards = [_first_last(e, n) for n in ("rm_steps", "verifier_steps", "rm_outcome", "verifier_outcome")]
                gaps = [fmt(e.get("gap_mean")), fmt(e.get("gap_last"))]
                stops = [e.get("guard_stopped_at") or MISSING, e.get("grpo_steps", MISSING)]
                lines.append(md_row([arm, seed, e["iteration"], *rewards, *gaps, *stops]))
    return lines


def _targets_table(summary: dict) -> list[str]:
    lines = md_header(
        [
            "seed",
            "iterative pass@1: start → end",
            "change [95% CI]",
            f"≥ +{TARGET_GAIN}?",
            "iterative − frozen at the end [95% CI]",
            "above frozen beyond the noise?",
        ],
        "rlllll",
    )
    for t in summary["targets"]:
        yes = {True: "yes", False: "**no**", None: MISSING}
        start_end = f"{fmt(t['start'])} → {fmt(t['end'])} (iteration {t['iteration']})"
        gain, vs_frozen = ci(t["gain"], sign=True), ci(t.get("vs_frozen"), sign=True)
        lines.append(
            md_row(
                [
                    t["seed"],
                    start_end,
                    gain,
                    yes[t["gain_target_met"]],
                    vs_frozen,
                    yes[t.get("above_frozen_beyond_noise")],
                ]
            )
        )
    return lines


def _against_base_table(summary: dict, seeds: list[str]) -> list[str]:
    lines = md_header(
        ["arm", "iteration", *(f"seed {s}" for s in seeds), "mean of the seeds [95% CI]"], "lr" + "l" * (len(seeds) + 1)
    )
    for arm, entry in summary.get("against_base", {}).items():
        cells = [ci(entry["per_seed"].get(s), sign=True) for s in seeds]
        iterations = ", ".join(str(i) for i in sorted(set(entry["iterations"])))
        lines.append(md_row([arm, iterations, *cells, ci(entry.get("mean"), sign=True)]))
    return lines


def render_arms(summary: dict, config: dict, k: int, found: dict | None = None, task=None) -> str:
    """The markdown report of :func:`~grpo_ext.experiments.iterative.summary.summarize`'s ``summary`` (with ``found``,
    the study's scoring of it, :func:`~grpo_ext.experiments.iterative.findings.findings`, first)."""
    b = summary["bootstrap"]
    lines = [
        f"# Iterative RL: {config.get('reward_model_type')} reward model, arms "
        f"{', '.join(summary['arms'])} (DeepSeekMath 4.1.4)",
        "",
        f"Task `{config.get('task')}` {config.get('task_kwargs') or ''}, "
        f"base `{portable_path(config.get('base', ''))}`, "
        f"{config.get('max_steps')} GRPO steps per iteration (advantage_mode {config.get('advantage_mode')}), "
        f"replay_ratio {config.get('replay_ratio')}, RL prompt pool: {config.get('train_size')} train prompts after "
        f"the first {config.get('train_offset')}. Intervals: {b['confidence']:.0%} bootstrap over the "
        f"{config.get('eval_prompts')} test problems ({b['n_resamples']} resamples, seed {b['seed']}); differences "
        "paired by problem. Iteration 0 is the base policy, shared by the arms of a seed.",
        "",
        *(render_findings(found, task) if found else []),
        "## Targets (reported, not asserted)",
        "",
        *_targets_table(summary),
        "",
        "## Every arm against the base: test pass@1, last iteration minus iteration 0 (paired by problem)",
        "",
        *_against_base_table(summary, sorted({s for a in summary["arms"].values() for s in a}, key=int)),
        "",
        "## The policy: test pass@1 per iteration",
        "",
        *_policy_table(summary, PASS_AT_1),
        "",
        f"## The policy: test maj@{k} per iteration",
        "",
        *_policy_table(summary, MAJ_AT_K.at(k)),
        "",
        "## The policy on its own training prompts: right rate of fresh samples on pool prompts",
        "",
        "What GRPO optimises directly (the verifier's verdict on fresh samples of the RL prompt pool); the test "
        "tables above say how much of it generalises.",
        "",
        *_policy_table(summary, "pool_accuracy"),
        "",
        "## The reward model on fresh samples of the current policy",
        "",
        "Fresh samples (never trained on) of the iteration's policy, labelled by the step verifier: on pool prompts "
        "(what GRPO is rewarded on) and on held-out (validation) prompts. `before`: the RM the policy was trained "
        "against (iteration 0: the untrained RM); `after`: the retrained RM (iterative arm only; frozen keeps RM_0).",
        "",
        *_rm_table(summary),
        "",
        "## Reward hacking: the RM's reward against the verifier's on the training samples",
        "",
        "Logged during GRPO on the same samples (first → last logged window); the verifier's rewards have weight 0. "
        "Gap: RM reward − verifier reward (step level for a process RM); > 0: the RM rates the samples better than "
        "they are.",
        "",
        *_hacking_table(summary),
        "",
    ]
    return "\n".join(lines)


def _reward(entry: dict, source: str) -> float | None:
    """The mean training reward of ``source`` (``rm`` / ``verifier``) in an iteration: step level when logged."""
    for level in ("steps", "outcome"):
        value = entry.get(f"train_{source}_{level}_mean")
        if value is not None:
            return value
    return None


def _columns(points: list[tuple]) -> tuple[list, list]:
    return [p[0] for p in points], [p[1] for p in points]


def plot_arms(summary: dict, states: dict, k: int) -> bytes:
    """2 x 3. Top: test pass@1, test maj@k and the right rate on the RL pool per iteration (mean over seeds, band =
    the seeds' range). Bottom: the hacking gap over GRPO steps (one line per seed), the RM's step AUC on fresh pool
    samples (the RM the policy trained against; iterative also after its update), the training rewards per
    iteration (RM and verifier, step level)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(16, 8))
    titles = {name: f"test {name}" for name in (PASS_AT_1, MAJ_AT_K.at(k))} | {
        "pool_accuracy": "right rate on the RL pool"
    }
    for ax, metric in zip(axes[0], titles, strict=True):
        for arm, rows in summary["means"].items():
            rows = [r for r in rows if metric in r]
            color, style = ARM_STYLE.get(arm, (None, "o-"))
            x = [r["iteration"] for r in rows]
            ax.plot(x, [r[metric]["mean"] for r in rows], style, color=color, label=arm)
            ax.fill_between(
                x, [r[metric]["min"] for r in rows], [r[metric]["max"] for r in rows], color=color, alpha=0.2
            )
        ax.set(title=f"{titles[metric]} (mean of seeds, band: range)", xlabel="iteration", ylabel=metric)
    ax = axes[1, 0]
    for arm, runs in states.items():
        color, _ = ARM_STYLE.get(arm, (None, "o-"))
        for i, (_, state) in enumerate(sorted(runs.items())):
            curve = training_gap_curve(state["history"])
            if curve:
                ax.plot(*_columns(curve), "-", color=color, alpha=0.8, lw=1, label=arm if i == 0 else None)
    ax.axhline(0, color="grey", lw=0.8)
    ax.set(title="hacking gap: RM reward − verifier reward (training)", xlabel="GRPO step (all iterations)")
    ax = axes[1, 1]
    for arm, runs in summary["arms"].items():
        color, style = ARM_STYLE.get(arm, (None, "o-"))
        for i, series in enumerate(runs.values()):
            points = [(e["iteration"], e["rm_auc_before"]) for e in series[1:] if e.get("rm_auc_before") is not None]
            if points:
                ax.plot(*_columns(points), style, color=color, alpha=0.8, label=f"{arm} (RM used)" if i == 0 else None)
            after = [(e["iteration"], e["rm_auc_after"]) for e in series if e.get("rm_auc_after") is not None]
            if arm == "iterative" and after:
                label = "iterative (after update)" if i == 0 else None
                ax.plot(*_columns(after), "x--", color=color, alpha=0.6, label=label)
    ax.set(title="RM step AUC on fresh pool samples", xlabel="iteration", ylabel="AUC")
    ax = axes[1, 2]
    for arm, runs in summary["arms"].items():
        color, style = ARM_STYLE.get(arm, (None, "o-"))
        for i, series in enumerate(runs.values()):
            for name, line, what in (("rm", style, "RM"), ("verifier", ":", "verifier")):
                points = [(e["iteration"], _reward(e, name)) for e in series[1:] if _reward(e, name) is not None]
                if points:
                    label = f"{arm}: {what}" if i == 0 else None
                    ax.plot(*_columns(points), line, color=color, alpha=0.8, label=label)
    ax.set(title="training reward per iteration (RM solid, verifier dotted)", xlabel="iteration")
    for ax in axes.flat:
        ax.grid(alpha=0.3)
        if ax.get_xlabel() == "iteration":
            ax.xaxis.get_major_locator().set_params(integer=True)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return figure_png(fig, dpi=100)


def _scored(states: dict) -> bool:
    """Whether the rows keep their test results (runs saved before they did are reported without the findings)."""
    return any("test_result" in row for runs in states.values() for s in runs.values() for row in s["history"])


def _task(it_args):
    from grpo_ext.tasks import get_task

    return get_task(it_args.task, **it_args.task_kwargs)


def _without_per_problem(summary_states: dict) -> dict:
    drop = ("test_n_correct", "test_result")
    return {
        arm: {
            str(seed): [
                {
                    key: (portable_path(v) if key in ("policy", "reference") and isinstance(v, str) else v)
                    for key, v in row.items()
                    if key not in drop and not key.startswith("test_maj@")
                }
                for row in state["history"]
            ]
            for seed, state in runs.items()
        }
        for arm, runs in summary_states.items()
    }


def write_experiment_report(states: dict, report_dir, it_args, arms: list[str], seeds: list[int]) -> Path:
    """Writes the three report files to ``report_dir`` from ``{arm: {seed: state}}``; returns the folder. A folder of
    files the experiment did not write (a user's report.md) is refused (`report_folder`), never overwritten."""
    report_folder(report_dir).check()  # before anything is computed
    k = it_args.eval_samples
    summary = summarize(states, arms, seeds, k)
    config = next((s["config"] for runs in states.values() for s in runs.values()), {})
    config = {**config, "base": portable_path(config.get("base", ""))}
    curves = {
        arm: {str(seed): training_gap_curve(state["history"]) for seed, state in runs.items()}
        for arm, runs in states.items()
    }
    found = findings(states, arms, it_args) if it_args.expectations or _scored(states) else None
    task = _task(it_args)
    payload = {"config": config, "summary": summary, "rows": _without_per_problem(states), "gap_curves": curves}
    if found is not None:
        payload["findings"] = found
    with report_folder(report_dir) as folder:
        atomic_write_json(folder.path(REPORT_JSON), payload)
        atomic_write_text(folder.path(REPORT_MD), render_arms(summary, config, k, found, task))
        atomic_write_bytes(folder.path(REPORT_PNG), plot_arms(summary, states, k))
    return Path(report_dir)
