"""How the online arms trained, step by step, from the trainer's log history (``training_log.json``).

A test number says *that* an arm did not learn; the log says *why*. An online step learns only from groups whose
rewards differ: when every group of a step is all-wrong (TRL's ``frac_reward_zero_std`` = 1) an outcome GRPO step
has no gradient (``grad_norm`` 0), and a policy that drifted to completions at the length cap (mean length at the
cap, no answer) may never draw a right sample again: the run ends in a stretch of steps without gradient. The
summary of a run below makes that visible per run (search runs and the picks' test seeds alike).

Pure functions over a log history (a list of dicts, as ``trainer.state.log_history`` writes it), in the manner of
verl's ``core_algos``; :func:`read_dynamics` is the one reader. A log without training ``reward`` entries (SFT, RFT,
DPO: offline methods) has no summary (None).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from grpo_ext.report_format import arrow, fmt, md_header, md_row

__all__ = [
    "ONLINE_KEYS",
    "no_gradient",
    "plot_dynamics",
    "read_dynamics",
    "render_dynamics",
    "series",
    "summarize",
    "trailing",
    "training_steps",
]

#: The per-step keys of TRL's online trainers the section reads.
ONLINE_KEYS = (
    "reward",
    "frac_reward_zero_std",
    "completions/mean_length",
    "completions/clipped_ratio",
    "grad_norm",
)


def _number(value) -> float | None:
    """``value`` as a finite float; None for a missing, non-numeric, NaN or infinite one."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def training_steps(history: Sequence[dict]) -> list[dict]:
    """The entries of a log history that a training step wrote: those with a finite ``reward`` (the evaluation
    entries of the learning curve and the trainer's closing summary have none)."""
    return [e for e in history if isinstance(e, dict) and _number(e.get("reward")) is not None]


def series(history: Sequence[dict]) -> dict[str, list]:
    """Per training step: ``step`` and each of :data:`ONLINE_KEYS` (None where the entry lacks it or it is not a
    finite number), aligned by position."""
    steps = training_steps(history)
    return {"step": [e.get("step") for e in steps], **{k: [_number(e.get(k)) for e in steps] for k in ONLINE_KEYS}}


def no_gradient(entry: dict) -> bool | None:
    """Whether a training step had no gradient: ``grad_norm`` == 0 where it is logged (the measured fact: the
    optimizer got nothing), else every group zero-std (``frac_reward_zero_std`` == 1); None when neither is logged.

    ``grad_norm`` comes first because a zero-std step is not gradient-free in every method: online RFT reinforces
    the right samples of an all-right group (zero std, a gradient still), and a KL term (beta > 0) has a gradient in
    any group. For outcome GRPO at beta 0 the two rules agree: zero std is the cause, a zero norm the effect."""
    norm = _number(entry.get("grad_norm"))
    if norm is not None:
        return norm == 0.0
    zero_std = _number(entry.get("frac_reward_zero_std"))
    return None if zero_std is None else zero_std >= 1.0


def trailing(flags: Sequence[bool | None]) -> int:
    """How many of the last ``flags`` are True in a row (an unknown, None, ends the stretch)."""
    count = 0
    for flag in reversed(flags):
        if flag is not True:
            break
        count += 1
    return count


def _first_last(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    known = [v for v in values if v is not None]
    return (known[0], known[-1]) if known else (None, None)


def summarize(history: Sequence[dict]) -> dict | None:
    """A run's summary: its training ``steps`` (logged ones), ``no_gradient_steps`` (:func:`no_gradient`),
    ``trailing_no_gradient_steps`` (the stretch it ended in; ``ends_without_gradient`` when > 0),
    ``all_zero_std_steps`` (every group zero-std), ``mean_reward`` (over the steps that logged one), and the first
    and last logged ``completions/mean_length`` and ``completions/clipped_ratio``. Missing and non-finite values are
    skipped, never averaged in. None for a log without training ``reward`` entries (an offline method)."""
    steps = training_steps(history)
    if not steps:
        return None
    data = series(steps)
    flags = [no_gradient(e) for e in steps]
    rewards = [r for r in data["reward"] if r is not None]
    first_length, last_length = _first_last(data["completions/mean_length"])
    first_clipped, last_clipped = _first_last(data["completions/clipped_ratio"])
    ending = trailing(flags)
    return {
        "steps": len(steps),
        "no_gradient_steps": sum(f is True for f in flags),
        "trailing_no_gradient_steps": ending,
        "ends_without_gradient": ending > 0,
        "all_zero_std_steps": sum(z is not None and z >= 1.0 for z in data["frac_reward_zero_std"]),
        "mean_reward": sum(rewards) / len(rewards),
        "first_mean_length": first_length,
        "last_mean_length": last_length,
        "first_clipped_ratio": first_clipped,
        "last_clipped_ratio": last_clipped,
    }


def read_dynamics(study, out: str | Path, picks: dict) -> list[dict]:
    """Every online run of the study the report reads: the search runs (``Study.searched``: every setting and search
    seed trained, the ``rate_of`` arms' at their reference's picked rate) and the picks' test seeds, arm by arm in
    the study's order.
    Each: ``arm``, ``setting``, ``seed``, ``role`` (``search`` or ``test``), ``picked``, ``summary``, ``series``. A run
    without a log, or with an offline one (no summary), is left out."""
    from grpo_ext.methods.cost import LOG_FILE, read_json_file

    runs = [(*run, "search") for run in study.searched(out, picks)]
    runs += [(*run, "test") for run in study.test_runs(picks)]
    order = {arm.name: i for i, arm in enumerate(study.arms)}
    rows = []
    for arm, setting, seed, role in sorted(runs, key=lambda r: (order[r[0].name], r[3] == "test")):
        history = read_json_file(study.run_dir(out, arm, setting, seed), LOG_FILE)
        summary = summarize(history) if isinstance(history, list) else None
        if summary is None:
            continue
        picked = picks[arm.name].slug == setting.slug
        rows.append(
            {
                "arm": arm.name,
                "setting": setting.slug,
                "seed": seed,
                "role": role,
                "picked": picked,
                "summary": summary,
                "series": series(history),
            }
        )
    return rows


def _length(x: float | None) -> str:
    return fmt(x, 1)


def render_dynamics(runs: Sequence[dict]) -> list[str]:
    """The report's section: one row per online run (:func:`read_dynamics`), the legend above the table."""
    lines = [
        "## Training dynamics of the online arms (from the training logs)",
        "",
        "One row per online run: the search runs (seed marked *search*: every setting, scored on validation) and the "
        "picked setting's test seeds, read from each run's `training_log.json` (TRL's log, one entry per logged "
        "training step). *steps*: the logged training steps (entries with a `reward`). *no-gradient steps*: steps "
        "with `grad_norm` = 0 (where it is not logged: `frac_reward_zero_std` = 1, every group all-right or "
        "all-wrong); the norm, not the zero-std share, decides, since online RFT still learns from all-right groups "
        "and a KL term has a gradient anywhere. *trailing*: how many of the last steps in a row had none (a run "
        "that ends in such a stretch had stopped learning; for outcome GRPO at beta 0 with a reward of 0: every "
        "group all-wrong). *mean reward*: the "
        "mean over steps of the step's mean reward. *mean length* and *clipped ratio*: "
        "`completions/mean_length` (tokens) and `completions/clipped_ratio` at the first and the last logged step; "
        "TRL's clipped ratio is the share of completions without an end-of-sequence token: cut at the length cap "
        "*or* ended by a stop string (which leaves no EOS), so it is high from the first step of a study with stop "
        "strings; a mean length at the cap is what says every completion was cut. Missing or non-finite values are "
        "skipped.",
        "",
    ]
    if not runs:
        return [*lines, "No online run of this study left a training log with rewards.", ""]
    lines += md_header(
        [
            "arm",
            "setting",
            "seed",
            "steps",
            "no-gradient steps",
            "trailing no-gradient steps",
            "mean reward",
            "mean length first → last",
            "clipped ratio first → last",
        ],
        "lllrrrrrr",
    )
    for run in runs:
        s = run["summary"]
        seed = f"{run['seed']} (search)" if run["role"] == "search" else str(run["seed"])
        setting = f"{run['setting']} (pick)" if run["picked"] else run["setting"]
        lines.append(
            md_row(
                [
                    run["arm"],
                    setting,
                    seed,
                    str(s["steps"]),
                    str(s["no_gradient_steps"]),
                    str(s["trailing_no_gradient_steps"]),
                    fmt(s["mean_reward"]),
                    arrow(s["first_mean_length"], s["last_mean_length"], _length),
                    arrow(s["first_clipped_ratio"], s["last_clipped_ratio"]),
                ]
            )
        )
    return [*lines, ""]


def plot_dynamics(runs: Sequence[dict]) -> bytes | None:
    """Per online arm (a column): the mean completion length (top) and the share of zero-std groups (bottom) against
    the training step, one line per run (search runs dashed, test seeds solid); a row shares its y axis, so the arms
    compare at a glance. None without any run."""
    if not runs:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from grpo_ext.io import figure_png

    arms = list(dict.fromkeys(r["arm"] for r in runs))
    fig, axes = plt.subplots(2, len(arms), figsize=(4.5 * len(arms), 7), squeeze=False, sharex="col", sharey="row")
    colours = plt.get_cmap("tab10").colors
    panels = (
        ("completions/mean_length", "mean completion length (tokens)"),
        ("frac_reward_zero_std", "zero-std share"),
    )
    for column, arm in enumerate(arms):
        mine = [r for r in runs if r["arm"] == arm]
        for i, run in enumerate(mine):
            label = f"{run['setting']} seed {run['seed']}" + (" (search)" if run["role"] == "search" else "")
            style = "--" if run["role"] == "search" else "-"
            for row, (key, _) in enumerate(panels):
                steps = zip(run["series"]["step"], run["series"][key], strict=True)
                points = [(x, y) for x, y in steps if x is not None and y is not None]
                if points:
                    xs, ys = zip(*points, strict=True)
                    axes[row][column].plot(xs, ys, style, marker=".", color=colours[i % len(colours)], label=label)
        axes[0][column].set_title(arm)
        axes[1][column].set(xlabel="training step", ylim=(-0.05, 1.05))
        for row, (_, ylabel) in enumerate(panels):
            axes[row][column].set_ylabel(ylabel)
            axes[row][column].grid(alpha=0.3)
        axes[0][column].legend(fontsize=7)
    fig.suptitle("Online arms' training logs: completion length and the share of groups without outcome signal")
    fig.tight_layout()
    return figure_png(fig)
