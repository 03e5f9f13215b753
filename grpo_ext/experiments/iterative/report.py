"""One run's report (an arm of a seed, in its folder): a markdown table, the rows as JSON and a plot of RM and
policy accuracy per iteration.

Model folders (the base, each iteration's policy and reference) are recorded as :func:`grpo_ext.io.portable_path`
gives them: relative to the repository when inside it, so a committed report names no folder of the machine that
ran it. The loop's state holds them as paths in memory (its files relative to the seed folder, :mod:`.state`)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from grpo_ext.evaluation.registry import MAJ_AT_K, PASS_AT_1, headline_trio
from grpo_ext.io import atomic_write_bytes, atomic_write_json, atomic_write_text, figure_png, portable_path
from grpo_ext.report_format import MISSING, arrow, cell, md_header, md_row

REPORT_MD, REPORT_JSON, REPORT_PNG = "report.md", "report.json", "iterative.png"

__all__ = ["plot_report", "portable_state", "render_report", "report_folder", "write_report"]


def _is_report_folder(folder: Path) -> bool:
    """A report folder from before the record: only the report's names (hidden ones are the lock's and unfinished
    atomic writes'), and a report.json of this loop (its config)."""
    if not {p.name for p in folder.iterdir() if not p.name.startswith(".")} <= {REPORT_MD, REPORT_JSON, REPORT_PNG}:
        return False
    with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
        return "config" in json.loads((folder / REPORT_JSON).read_text())
    return False


def report_folder(report_dir: str | Path):
    """The `grpo_ext.run_folder.OutputFolder` of an iterative report (`report_dir`; a run's own `report/` too): a folder
    holding a user's report.md is refused, never overwritten. `.check()` says so before the experiment trains."""
    from grpo_ext.run_folder import OutputFolder

    return OutputFolder(report_dir, writer="scripts/iterative.py", field_name="report_dir", adopt=_is_report_folder)


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


def _first_to_last(row: dict, name: str) -> str:
    if f"train_{name}_first" not in row:
        return MISSING
    return f"{cell(row.get(f'train_{name}_first'))} → {cell(row.get(f'train_{name}_last'))}"


def _before_after(row: dict, key: str) -> str:
    return arrow(row.get(f"{key}_before"), row.get(f"{key}_after"), cell)


def _columns(k: int) -> list[str]:
    pass_at_1, maj_at_k, pass_at_k = headline_trio(k)
    return [
        "iteration",
        "RM accuracy",
        "RM AUC",
        f"policy {pass_at_1}",
        maj_at_k,
        pass_at_k,
        "policy right rate, pool",
        "RM data: new + replay (ratio used)",
        "RM reward in training (first → last)",
        "verifier reward in training (first → last)",
        "seconds",
    ]


def render_report(state: dict, k: int) -> str:
    """The markdown table of one run's rows (``k``: samples per prompt of maj@k / pass@k). The experiment's
    combined report, with intervals and every arm, is :mod:`grpo_ext.experiments.iterative.arms_report`'s."""
    rows = state["history"]
    config = state["config"]
    arm = config.get("arm", "iterative")
    lines = [
        f"# Iterative RL, arm `{arm}`, seed {config.get('seed', '–')}: {config['reward_model_type']} reward model "
        "(DeepSeekMath 4.1.4)",
        "",
        f"Task `{config['task']}` {config['task_kwargs'] or ''}, base `{config['base']}`, "
        f"{config['max_steps']} GRPO steps per iteration, replay_ratio {config['replay_ratio']}.",
        "",
        "RM accuracy / AUC: on fresh samples of the iteration's policy on pool prompts, against the verifier (step "
        "level for a process RM), before the RM update (the RM the policy was trained against) and after it. "
        "Iteration 0: the base policy; `before` is the untrained RM. Policy metrics: evaluation harness on test "
        "prompts at the sampling temperature.",
        "",
        *md_header(_columns(k), "rllrrrrlllr"),
    ]
    for r in rows:
        data = f"{r['n_new']} + {r['n_replay']} ({cell(r['replay_ratio_used'])})" if "n_new" in r else MISSING
        lines.append(
            md_row(
                [
                    r["iteration"],
                    _before_after(r, "rm_accuracy"),
                    _before_after(r, "rm_auc"),
                    *(cell(r[m]) for m in headline_trio(k)),
                    cell(r.get("policy_sample_accuracy")),
                    data,
                    _first_to_last(r, "rm_outcome"),
                    _first_to_last(r, "verifier_outcome"),
                    f"{r['seconds']:.0f}",
                ]
            )
        )
    lines.append("")
    return "\n".join(lines)


def plot_report(state: dict, k: int) -> bytes:
    """PNG: RM AUC before/after each update (left), the policy's pass@1 and maj@k (right)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = state["history"]
    x = [r["iteration"] for r in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for key, style, label in (("rm_auc_before", "o--", "before update"), ("rm_auc_after", "o-", "after update")):
        points = [(r["iteration"], r[key]) for r in rows if r.get(key) is not None]
        if points:
            left.plot([p[0] for p in points], [p[1] for p in points], style, label=label)
    left.set(title="RM AUC vs verifier (fresh samples)", xlabel="iteration", ylabel="AUC")
    if left.get_legend_handles_labels()[0]:
        left.legend()
    right.plot(x, [r[PASS_AT_1] for r in rows], "o-", label=PASS_AT_1)
    right.plot(x, [r[MAJ_AT_K.at(k)] for r in rows], "s--", label=MAJ_AT_K.at(k))
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
    state = portable_state(state)
    with report_folder(report_dir) as folder:
        atomic_write_text(folder.path(REPORT_MD), render_report(state, k))
        atomic_write_json(folder.path(REPORT_JSON), {"config": state["config"], "rows": state["history"]})
        atomic_write_bytes(folder.path(REPORT_PNG), plot_report(state, k))
    return Path(report_dir)
