"""The loop's report: a markdown table, the rows as JSON and a plot of RM and policy accuracy per iteration.

Model folders (the base, each iteration's policy and reference) are recorded as :func:`grpo_ext.io.portable_path`
gives them: relative to the repository when inside it, so a committed report names no folder of the machine that
ran it. The loop's own state keeps its absolute paths (a resume needs them)."""

from __future__ import annotations

from pathlib import Path

from grpo_ext.io import atomic_write_bytes, atomic_write_json, atomic_write_text, figure_png, portable_path

REPORT_MD, REPORT_JSON, REPORT_PNG = "report.md", "report.json", "iterative.png"

__all__ = ["plot_report", "portable_state", "render_report", "write_report"]

#: The fields holding a model folder: in the config, and in each row of the history.
_CONFIG_PATHS, _ROW_PATHS = ("base",), ("policy", "reference")


def portable_state(state: dict) -> dict:
    """``{"config", "history"}`` of ``state`` with every model folder as :func:`~grpo_ext.io.portable_path` gives it
    (``state`` itself is left as it is)."""

    def portable(record: dict, fields: tuple[str, ...]) -> dict:
        return {k: portable_path(v) if k in fields and isinstance(v, str) else v for k, v in record.items()}

    return {
        "config": portable(state["config"], _CONFIG_PATHS),
        "history": [portable(row, _ROW_PATHS) for row in state["history"]],
    }


def _fmt(value) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _first_to_last(row: dict, name: str) -> str:
    if f"train_{name}_first" not in row:
        return "–"
    return f"{_fmt(row.get(f'train_{name}_first'))} → {_fmt(row.get(f'train_{name}_last'))}"


def render_report(state: dict, k: int) -> str:
    """The markdown table of the loop's rows (``k``: samples per prompt of maj@k / pass@k)."""
    rows = state["history"]
    config = state["config"]
    lines = [
        f"# Iterative RL: {config['reward_model_type']} reward model retrained on policy samples (DeepSeekMath 4.1.4)",
        "",
        f"Task `{config['task']}` {config['task_kwargs'] or ''}, base `{config['base']}`, "
        f"{config['max_steps']} GRPO steps per iteration, replay_ratio {config['replay_ratio']}.",
        "",
        "RM accuracy / AUC: on fresh samples of the iteration's policy on held-out (test) prompts, against the "
        "verifier, before the RM update (the RM the policy was trained against) and after it; the held-out right "
        "rate is the verifier's, so max(rate, 1 - rate) is what a constant RM would score. Iteration 0: the base "
        "policy; `before` is the untrained RM. Policy metrics: evaluation harness on test prompts at the sampling "
        "temperature.",
        "",
        f"| iteration | held-out right rate | RM acc before | RM acc after | RM AUC before | RM AUC after | "
        f"policy pass@1 | maj@{k} | "
        f"pass@{k} | policy acc on RM-data samples | RM data: new + replay (ratio used) | "
        "RM reward in training (first → last) | verifier reward in training (first → last) | seconds |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['iteration']} | {_fmt(r.get('heldout_positive_rate'))} | {_fmt(r['rm_accuracy_before'])} | "
            f"{_fmt(r['rm_accuracy_after'])} | "
            f"{_fmt(r['rm_auc_before'])} | {_fmt(r['rm_auc_after'])} | {_fmt(r['pass@1'])} | {_fmt(r[f'maj@{k}'])} | "
            f"{_fmt(r[f'pass@{k}'])} | {_fmt(r['policy_sample_accuracy'])} | "
            f"{r['n_new']} + {r['n_replay']} ({_fmt(r['replay_ratio_used'])}) | "
            f"{_first_to_last(r, 'rm_reward')} | {_first_to_last(r, 'verifier_reward')} | {r['seconds']:.0f} |"
        )
    lines.append("")
    return "\n".join(lines)


def plot_report(state: dict, k: int) -> bytes:
    """PNG: RM accuracy before/after each update (left), the policy's pass@1 and maj@k (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = state["history"]
    x = [r["iteration"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    left.plot(x, [r["rm_accuracy_before"] for r in rows], "o--", label="before update")
    left.plot(x, [r["rm_accuracy_after"] for r in rows], "o-", label="after update")
    left.set(title="RM accuracy vs verifier (fresh held-out samples)", xlabel="iteration", ylabel="accuracy")
    left.legend()
    right.plot(x, [r["pass@1"] for r in rows], "o-", label="pass@1")
    right.plot(x, [r[f"maj@{k}"] for r in rows], "s--", label=f"maj@{k}")
    right.set(title="policy accuracy (test prompts)", xlabel="iteration", ylabel="accuracy")
    right.legend()
    for ax in (left, right):
        ax.set_xticks(x)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return figure_png(fig, dpi=100)


def write_report(state: dict, report_dir: str | Path, k: int) -> Path:
    """``report.md`` (table), ``report.json`` (rows) and ``iterative.png`` (RM and policy accuracy per iteration),
    model folders portable (see :func:`portable_state`)."""
    report_dir = Path(report_dir)
    state = portable_state(state)
    atomic_write_text(report_dir / REPORT_MD, render_report(state, k))
    atomic_write_json(report_dir / REPORT_JSON, {"config": state["config"], "rows": state["history"]})
    atomic_write_bytes(report_dir / REPORT_PNG, plot_report(state, k))
    return report_dir
