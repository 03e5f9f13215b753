"""Compare trained methods: the paradigm table beside pass@1 / maj@k / pass@k, training cost and the paper's findings.

Used by ``evals/compare.py`` (the command line). A *run* is ``NAME=PATH``: ``NAME`` is a method of
:data:`grpo_ext.methods.METHODS` (or ``base``, the starting checkpoint) optionally followed by ``@LABEL``
(``grpo_outcome@seed1``); runs of one method with different labels are its repeats (seeds), and runs of different
methods with the same label are paired. ``PATH`` is a model folder (evaluated here, its ``training_cost.json`` and
``learning_curve.json`` read when present) or a JSON file of evaluation results (``evals/passk_majk.py``'s
``report.json`` with one model, or one :func:`grpo_ext.evaluation.harness.evaluate_model` result).

Every run must be evaluated with the same sampling settings (task, problems, n, temperature, top_p, max tokens,
seed): results evaluated differently are refused, or with ``allow_mixed_settings`` reported under a warning
naming the differences.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from grpo_ext.evaluation.metrics import pass_at_k_many
from grpo_ext.io import atomic_write_bytes, atomic_write_text
from grpo_ext.methods.cost import COST_FILE, CURVE_FILE, RUN_FILE, read_json_file
from grpo_ext.methods.paradigm import BASE_RUN, METHODS, get_method, paradigm_markdown, paradigm_rows

__all__ = [
    "Run",
    "check_settings",
    "findings",
    "parse_run",
    "render_markdown",
    "summarize",
    "write_comparison",
]

REPORT_MD, REPORT_JSON = "report.md", "report.json"
PASSK_PNG, SAMPLES_PNG = "passk_majk.png", "accuracy_vs_samples.png"
#: Paper findings are "agrees" only when every seed shows the stated direction by more than this (pass@1 points).
DEFAULT_TOLERANCE = 0.01


@dataclass
class Run:
    """One ``--run NAME=PATH``."""

    name: str
    method: str  # a METHODS key or BASE_RUN
    label: str  # "" when the name has no @LABEL
    path: str
    kind: str  # "checkpoint" or "results"
    result: dict | None = None
    cost: dict | None = None
    curve: dict | None = None
    trained_as: str | None = None
    flags: list[str] = field(default_factory=list)

    def to_dict(self, per_problem: bool = True) -> dict:
        result = dict(self.result or {})
        if not per_problem:
            result.pop("per_problem", None)
        return {"name": self.name, "method": self.method, "label": self.label, "path": self.path, "kind": self.kind,
                "trained_as": self.trained_as, "cost": self.cost, "curve": self.curve, "flags": self.flags,
                "result": result}


# ------------------------------------------------------------------------------------------------------------
# parsing and checking the runs


def parse_run(spec: str) -> Run:
    """``NAME=PATH`` -> :class:`Run` (the path is checked, nothing is loaded). Errors name the spec."""
    from grpo_ext.models import EMBEDDED_NAME, resolve_model_path

    if "=" not in spec:
        raise ValueError(f"--run {spec!r}: expected NAME=CHECKPOINT (e.g. grpo_outcome@seed0=outputs/grpo_outcome)")
    name, path = (part.strip() for part in spec.split("=", 1))
    if not name or not path:
        raise ValueError(f"--run {spec!r}: expected NAME=CHECKPOINT with both parts non-empty")
    method, _, label = name.partition("@")
    if method != BASE_RUN and method not in METHODS:
        raise ValueError(
            f"--run {spec!r}: unknown method {method!r}; known: {BASE_RUN} (the starting model), {', '.join(METHODS)} "
            f"(optionally NAME@LABEL, e.g. rft@seed1)"
        )
    if path.endswith(".json"):
        if not Path(path).is_file():
            raise FileNotFoundError(f"--run {name}: results file {path} does not exist")
        return Run(name, method, label, path, "results")
    if path != EMBEDDED_NAME and not Path(path).expanduser().exists():
        raise FileNotFoundError(f"--run {name}: checkpoint {path} does not exist")
    try:
        resolve_model_path(path)
    except FileNotFoundError as err:
        raise FileNotFoundError(f"--run {name}: {err}") from None
    return Run(name, method, label, path, "checkpoint")


def parse_runs(specs: Sequence[str]) -> list[Run]:
    if not specs:
        raise ValueError("no runs: give at least one --run NAME=CHECKPOINT")
    runs = [parse_run(s) for s in specs]
    names = [r.name for r in runs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ValueError(f"--run names must be unique; repeated: {', '.join(duplicates)} (use NAME@LABEL)")
    for run in runs:
        if run.kind == "checkpoint" and Path(run.path).is_dir():
            record = read_json_file(run.path, RUN_FILE)
            run.trained_as = ((record or {}).get("method") or {}).get("name")
            if run.trained_as and run.method != BASE_RUN and run.trained_as != run.method:
                raise ValueError(
                    f"--run {run.name}: {run.path} was trained as {run.trained_as!r}, not {run.method!r} "
                    f"(see {RUN_FILE})"
                )
            run.cost = read_json_file(run.path, COST_FILE)
            run.curve = read_json_file(run.path, CURVE_FILE)
    return runs


def load_results_file(run: Run) -> dict:
    """The one evaluation result in a results JSON (an ``evaluate_model`` dict or a report with one model)."""
    try:
        data = json.loads(Path(run.path).read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"--run {run.name}: {run.path} is not valid JSON ({err})") from None
    if isinstance(data, dict) and "models" in data:
        models = data["models"]
        if len(models) != 1:
            raise ValueError(f"--run {run.name}: {run.path} holds {len(models)} results; give a file with one")
        data = models[0]
    needed = {"pass@k", "maj@k", "ks", "n", "params", "task_id", "n_problems"}
    if not isinstance(data, dict) or not needed <= set(data):
        raise ValueError(f"--run {run.name}: {run.path} is not an evaluation result (needs {sorted(needed)})")
    data.setdefault("params_key", _params_key(data["params"]))
    if "training_cost" in data and run.cost is None:
        run.cost = data["training_cost"]
    return data


def _params_key(params: dict) -> str:
    return (f"temperature={float(params['temperature'])!r},top_p={float(params['top_p'])!r},"
            f"max_new_tokens={params['max_new_tokens']},seed={params['seed']}")


def settings_of(result: dict) -> dict:
    """What must be equal for two evaluations to be compared."""
    ids = [p["problem_id"] for p in result.get("per_problem", [])]
    return {
        "task_id": result["task_id"],
        "n_problems": result["n_problems"],
        "problems": tuple(ids) if ids else None,
        "n": result["n"],
        "sampling": result.get("params_key") or _params_key(result["params"]),
    }


def check_settings(runs: Sequence[Run], *, allow_mixed: bool = False) -> list[str]:
    """Warnings when runs were evaluated differently; ``ValueError`` instead unless ``allow_mixed``."""
    reference = settings_of(runs[0].result)
    problems = []
    for run in runs[1:]:
        mine = settings_of(run.result)
        diffs = [k for k in reference if reference[k] != mine[k] and not (k == "problems" and None in
                                                                           (reference[k], mine[k]))]
        if diffs:
            text = "; ".join(f"{k}: {mine[k]!r} vs {reference[k]!r}" for k in diffs if k != "problems")
            if "problems" in diffs:
                text = (text + "; " if text else "") + "a different problem set"
            problems.append(f"run {run.name} was evaluated with other settings than {runs[0].name} ({text})")
            run.flags.append("mixed evaluation settings")
    if problems and not allow_mixed:
        raise ValueError(
            "runs evaluated with different sampling settings cannot be compared: " + " | ".join(problems)
            + " (re-evaluate them with the same settings, or pass --allow-mixed-settings to report them flagged)"
        )
    return [f"NOT COMPARABLE: {p}" for p in problems]


def budget_warnings(runs: Sequence[Run]) -> list[str]:
    """Flag sampling methods whose runs generated different numbers of samples (the budgets must match)."""
    budgets = {r.name: r.cost.get("samples_generated") for r in runs
               if r.cost and r.method != BASE_RUN and get_method(r.method).reward_function != "-"}
    if len(set(budgets.values())) > 1:
        listing = ", ".join(f"{name}: {b}" for name, b in sorted(budgets.items()))
        return [f"sampling budgets differ between runs ({listing})"]
    return []


# ------------------------------------------------------------------------------------------------------------
# numbers


def _kmax(runs: Sequence[Run]) -> int:
    return min(r.result["ks"][-1] for r in runs)


def _stat(values: list[float]) -> dict:
    values = [float(v) for v in values]
    return {"mean": float(np.mean(values)), "min": min(values), "max": max(values),
            "std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0, "values": values, "count": len(values)}


def run_metrics(run: Run, k_max: int) -> dict:
    r = run.result
    metrics = {"pass@1": r["pass@k"].get("1", r.get("mean_accuracy")),
               f"maj@{k_max}": r["maj@k"][str(k_max)], f"pass@{k_max}": r["pass@k"][str(k_max)]}
    return metrics


def summarize(runs: Sequence[Run]) -> dict:
    """Per method (in METHODS order, base first): the metrics' mean / min / max / std over its runs, and cost."""
    k_max = _kmax(runs)
    order = [BASE_RUN, *METHODS]
    out = {}
    for method in order:
        mine = [r for r in runs if r.method == method]
        if not mine:
            continue
        metrics = [run_metrics(r, k_max) for r in mine]
        entry = {"runs": [r.name for r in mine],
                 "metrics": {m: _stat([x[m] for x in metrics]) for m in metrics[0]},
                 "pass@k": {}, "maj@k": {}}
        for k in sorted({k for r in mine for k in r.result["ks"]}):
            have = [r for r in mine if str(k) in r.result["pass@k"]]
            entry["pass@k"][k] = _stat([r.result["pass@k"][str(k)] for r in have])
            entry["maj@k"][k] = _stat([r.result["maj@k"][str(k)] for r in have])
        costs = [r.cost for r in mine if r.cost]
        if costs:
            entry["cost"] = {key: _stat([c[key] for c in costs]) for key in
                             ("samples_generated", "generated_tokens", "trained_sequences", "wall_seconds")
                             if all(isinstance(c.get(key), int | float) for c in costs)}
        out[method] = entry
    return {"k_max": k_max, "methods": out}


def _paired_se(a: Run, b: Run, k: int) -> float | None:
    """Standard error over problems of the paired pass@k difference a - b (evaluation noise, not seed noise)."""
    pa = {p["problem_id"]: p["n_correct"] for p in a.result.get("per_problem", [])}
    pb = {p["problem_id"]: p["n_correct"] for p in b.result.get("per_problem", [])}
    ids = sorted(set(pa) & set(pb))
    if len(ids) < 2 or a.result["n"] != b.result["n"] or k > a.result["n"]:
        return None
    n = a.result["n"]
    da = pass_at_k_many(np.full(len(ids), n), np.array([pa[i] for i in ids]), k)
    db = pass_at_k_many(np.full(len(ids), n), np.array([pb[i] for i in ids]), k)
    diff = np.asarray(da) - np.asarray(db)
    return float(np.std(diff, ddof=1) / math.sqrt(len(ids)))


def _pairs(runs: Sequence[Run], a: str, b: str) -> list[tuple[Run, Run]]:
    """Runs of methods a and b paired by label; the base (one run) pairs with every run; else every a x b."""
    ra = [r for r in runs if r.method == a]
    rb = [r for r in runs if r.method == b]
    if not ra or not rb:
        return []
    if len(rb) == 1 and b == BASE_RUN:
        return [(x, rb[0]) for x in ra]
    by_label = {r.label: r for r in rb}
    paired = [(x, by_label[x.label]) for x in ra if x.label in by_label]
    return paired if paired else [(x, y) for x in ra for y in rb]


def _verdict(diffs: list[float], margins: list[float]) -> str:
    """All pairs ahead by more than their margin: agrees; all behind by more: disagrees; else inconclusive."""
    if all(d > m for d, m in zip(diffs, margins, strict=True)):
        return "agrees"
    if all(d < -m for d, m in zip(diffs, margins, strict=True)):
        return "disagrees"
    return "inconclusive"


def _margins(pairs, k: int, tol: float) -> tuple[list[float], list[float]]:
    """Per pair: max(tolerance, 2 x the evaluation s.e. of the paired pass@k difference); and the s.e.s found."""
    ses = [_paired_se(x, y, k) for x, y in pairs]
    return [max(tol, 2 * s) if s is not None else tol for s in ses], [s for s in ses if s is not None]


def _fmt_diffs(pairs, diffs) -> str:
    return ", ".join(f"{x.label or x.name}: {d:+.3f}" for (x, _), d in zip(pairs, diffs, strict=True))


def _beats(runs, a: str, b: str, claim: str, tol: float, metric_k: int) -> dict:
    pairs = _pairs(runs, a, b)
    if not pairs:
        missing = [m for m in (a, b) if not any(r.method == m for r in runs)]
        return {"claim": claim, "verdict": "not measured", "text": f"not measured: no run of {', '.join(missing)}"}
    k_max = metric_k
    diffs = [x.result["pass@k"]["1"] - y.result["pass@k"]["1"] for x, y in pairs]
    maj = [x.result["maj@k"][str(k_max)] - y.result["maj@k"][str(k_max)] for x, y in pairs]
    margins, ses = _margins(pairs, 1, tol)
    verdict = _verdict(diffs, margins)
    mean_a = np.mean([x.result["pass@k"]["1"] for x in {id(x): x for x, _ in pairs}.values()])
    mean_b = np.mean([y.result["pass@k"]["1"] for y in {id(y): y for _, y in pairs}.values()])
    text = (f"pass@1 {get_method(a).title} {mean_a:.3f} vs {get_method(b).title} {mean_b:.3f}: difference per "
            f"pair {_fmt_diffs(pairs, diffs)} (mean {np.mean(diffs):+.3f}"
            + (f", evaluation s.e. ~{np.mean(ses):.3f}" if ses else "") + f"); maj@{k_max} difference "
            f"{_fmt_diffs(pairs, maj)}.")
    return {"claim": claim, "verdict": verdict, "text": text, "metric": "pass@1", "diffs": diffs,
            f"maj@{k_max}_diffs": maj, "eval_se": float(np.mean(ses)) if ses else None,
            "pairs": [[x.name, y.name] for x, y in pairs]}


def _rl_majk(runs, rl: str, tol: float, k: int) -> dict:
    claim = f"RL raises Maj@K but not Pass@K (K={k}, {get_method(rl).title} vs the base)"
    pairs = _pairs(runs, rl, BASE_RUN)
    if not pairs:
        missing = [m for m in (rl, BASE_RUN) if not any(r.method == m for r in runs)]
        return {"claim": claim, "verdict": "not measured", "text": f"not measured: no run of {', '.join(missing)}"}
    d_maj = [x.result["maj@k"][str(k)] - y.result["maj@k"][str(k)] for x, y in pairs]
    d_pass = [x.result["pass@k"][str(k)] - y.result["pass@k"][str(k)] for x, y in pairs]
    margins, ses = _margins(pairs, k, tol)  # pass@k noise; maj@k is judged against the tolerance alone
    maj_up = all(d > tol for d in d_maj)
    if maj_up and all(d <= m for d, m in zip(d_pass, margins, strict=True)):
        verdict = "agrees"
    elif all(d <= tol for d in d_maj):
        verdict = "disagrees"  # RL did not raise Maj@K
    elif maj_up and all(d > m for d, m in zip(d_pass, margins, strict=True)):
        verdict = "disagrees"  # Pass@K rose too
    else:
        verdict = "inconclusive"
    base = pairs[0][1].result
    text = (f"base maj@{k} {base['maj@k'][str(k)]:.3f}, pass@{k} {base['pass@k'][str(k)]:.3f}; change in maj@{k}: "
            f"{_fmt_diffs(pairs, d_maj)}; change in pass@{k}: {_fmt_diffs(pairs, d_pass)}"
            + (f" (evaluation s.e. of the pass@{k} change ~{np.mean(ses):.3f})" if ses else "") + ".")
    return {"claim": claim, "verdict": verdict, "text": text, f"maj@{k}_diffs": d_maj, f"pass@{k}_diffs": d_pass,
            "pairs": [[x.name, y.name] for x, y in pairs]}


def findings(runs: Sequence[Run], tolerance: float = DEFAULT_TOLERANCE) -> list[dict]:
    """The paper's four findings, each with a verdict ("agrees" / "disagrees" / "inconclusive" / "not measured").

    "A beats B" is judged on pass@1 (the paper's top-1 accuracy), paired by label (seed). A pair's margin is the
    larger of ``tolerance`` and twice the evaluation standard error of its paired pass@1 difference (over
    problems): the finding agrees when A is ahead by more than the margin in every pair, disagrees when behind by
    more than it in every pair, and is inconclusive otherwise. "RL raises Maj@K but not Pass@K" compares GRPO
    (outcome) with the base at the largest K: it agrees when maj@K rises by more than ``tolerance`` in every pair
    and pass@K by no more than its margin.
    """
    k = _kmax(runs)
    return [
        _beats(runs, "online_rft", "rft", "Online RFT beats RFT", tolerance, k),
        _beats(runs, "grpo_outcome", "online_rft", "GRPO beats online RFT (outcome supervision, same rewards)",
               tolerance, k),
        _beats(runs, "grpo_process", "grpo_outcome", "Process supervision beats outcome supervision (GRPO)",
               tolerance, k),
        _rl_majk(runs, "grpo_outcome", tolerance, k),
    ]


# ------------------------------------------------------------------------------------------------------------
# the report


def _f(x, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _spread(stat: dict | None, digits: int = 3) -> str:
    if stat is None:
        return "–"
    if stat["count"] == 1:
        return _f(stat["mean"], digits)
    return f"{stat['mean']:.{digits}f} ({stat['min']:.{digits}f}–{stat['max']:.{digits}f})"


def _int_stat(stat: dict | None) -> str:
    if stat is None:
        return "–"
    if stat["min"] == stat["max"]:
        return f"{stat['mean']:,.0f}"
    return f"{stat['mean']:,.0f} ({stat['min']:,.0f}–{stat['max']:,.0f})"


def _title(method: str) -> str:
    return "base (start of every method)" if method == BASE_RUN else get_method(method).title


def render_markdown(runs: Sequence[Run], summary: dict, found: list[dict], warnings: list[str], *,
                    command: str | None = None, tolerance: float = DEFAULT_TOLERANCE) -> str:
    first = runs[0].result
    p = first["params"]
    k = summary["k_max"]
    methods = [m for m in summary["methods"] if m != BASE_RUN]
    lines = ["# SFT, RFT, online RFT, DPO and GRPO under one paradigm", ""]
    if warnings:
        lines += ["> **Warning**", ">"] + [f"> - {w}" for w in warnings] + [""]
    lines += [
        f"Task `{first['task_id']}`, {first['n_problems']} held-out problems, n = {first['n']} samples per problem "
        f"(temperature {p['temperature']}, top_p {p['top_p']}, max_new_tokens {p['max_new_tokens']}, seed "
        f"{p['seed']}). pass@k: unbiased estimate; maj@k: exact expectation over k-subsets of the n samples. "
        "Numbers are the mean over a method's runs (seeds), with (min–max) when there are several.",
        "",
    ]
    if command:
        lines += [f"Command: `{command}`", ""]
    lines += ["## The paradigm (generated from `grpo_ext.methods.METHODS`)", "", paradigm_markdown(methods), ""]
    lines += [
        "## Results",
        "",
        f"| method | runs | pass@1 | maj@{k} | pass@{k} | samples generated | tokens generated | "
        f"training samples | wall time (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for method, entry in summary["methods"].items():
        m, cost = entry["metrics"], entry.get("cost", {})
        lines.append(
            f"| {_title(method)} | {len(entry['runs'])} | {_spread(m['pass@1'])} | {_spread(m[f'maj@{k}'])} | "
            f"{_spread(m[f'pass@{k}'])} | {_int_stat(cost.get('samples_generated'))} | "
            f"{_int_stat(cost.get('generated_tokens'))} | {_int_stat(cost.get('trained_sequences'))} | "
            f"{_int_stat(cost.get('wall_seconds'))} |"
        )
    lines += [
        "",
        "Samples generated: completions sampled to train (online methods: from the current policy during training; "
        "RFT/DPO: drawn once from the base). Training samples: sequences the gradient was computed on (a DPO pair "
        "counts two). Wall time: sampling + training, learning-curve evaluations excluded.",
        "",
        "## The paper's findings on this run",
        "",
        f"Verdicts: *agrees* when every pair of runs (paired by seed) shows the paper's direction by more than its "
        f"margin, *disagrees* when every pair shows the opposite, *inconclusive* otherwise. A pair's margin is the "
        f"larger of {tolerance} and twice the evaluation standard error (over problems) of its paired difference; "
        f"\"RL raises Maj@K\" needs maj@K to rise by more than {tolerance} in every pair, \"not Pass@K\" pass@K "
        f"to rise by no more than its margin.",
        "",
        "| finding (DeepSeekMath) | our run | numbers |",
        "|---|---|---|",
    ]
    lines += [f"| {f['claim']} | **{f['verdict']}** | {f['text']} |" for f in found]
    lines += ["", "## Every run", ""]
    ks = first["ks"]
    lines += ["| run | " + " | ".join(f"pass@{x}" for x in ks) + " | " + " | ".join(f"maj@{x}" for x in ks)
              + " | flags |", "|---|" + "---:|" * (2 * len(ks)) + "---|"]
    for run in runs:
        r = run.result
        cells = [_f(r["pass@k"].get(str(x))) for x in ks] + [_f(r["maj@k"].get(str(x))) for x in ks]
        lines.append(f"| {run.name} | " + " | ".join(cells) + f" | {', '.join(run.flags) or ''} |")
    lines += ["", "## Plots", "", f"![Pass@K and Maj@K per method]({PASSK_PNG})", "",
              f"![Accuracy against training samples]({SAMPLES_PNG})", ""]
    return "\n".join(lines)


_COLOURS = {BASE_RUN: "black", "sft": "tab:gray", "rft": "tab:orange", "online_rft": "tab:green", "dpo": "tab:purple",
            "grpo_outcome": "tab:blue", "grpo_process": "tab:red"}


def _colour(method: str) -> str:
    return _COLOURS.get(method, "tab:brown")


def plot_passk_majk(summary: dict) -> bytes:
    """Pass@K (solid) and Maj@K (dashed) against K per method: the mean over runs, the band spans min–max."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8), dpi=110, sharey=True)
    for ax, metric, title in ((axes[0], "pass@k", "Pass@K"), (axes[1], "maj@k", "Maj@K")):
        for method, entry in summary["methods"].items():
            ks = sorted(entry[metric])
            mean = [entry[metric][k]["mean"] for k in ks]
            style = "--" if method == BASE_RUN else "-"
            ax.plot(ks, mean, style, marker="o", markersize=3.5, color=_colour(method), label=_title(method))
            lo = [entry[metric][k]["min"] for k in ks]
            hi = [entry[metric][k]["max"] for k in ks]
            if lo != hi:
                ax.fill_between(ks, lo, hi, color=_colour(method), alpha=0.15, linewidth=0)
        ks_all = sorted({k for e in summary["methods"].values() for k in e[metric]})
        if len(ks_all) > 1:
            ax.set_xscale("log", base=2)
        ax.set_xticks(ks_all, [str(k) for k in ks_all])
        ax.minorticks_off()
        ax.grid(True, alpha=0.3)
        ax.set_xlabel("K (samples per problem)")
        ax.set_title(title)
    axes[0].set_ylabel("accuracy")
    handles = [Line2D([], [], color=_colour(m), linestyle="--" if m == BASE_RUN else "-") for m in summary["methods"]]
    fig.suptitle("Pass@K and Maj@K per method (mean over seeds, band: min–max)", fontsize=11)
    fig.tight_layout(rect=(0, 0, 0.8, 1))
    fig.legend(handles, [_title(m) for m in summary["methods"]], loc="center right", fontsize=8)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def plot_accuracy_vs_samples(runs: Sequence[Run], summary: dict) -> bytes:
    """Left: learning curves (pass@1 on held-out prompts against training samples), mean over seeds. Right: the
    final pass@1 of every run against the samples it generated to train."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), dpi=110)
    curve_params = None
    for method in summary["methods"]:
        curves = [r.curve for r in runs if r.method == method and r.curve and r.curve.get("points")]
        if not curves:
            continue
        curve_params = curve_params or curves[0].get("params")
        by_x: dict[int, list[float]] = {}
        for curve in curves:
            for point in curve["points"]:
                by_x.setdefault(int(point["trained_sequences"]), []).append(point["eval/pass@1"])
        xs = sorted(by_x)
        left.plot(xs, [np.mean(by_x[x]) for x in xs], marker="o", markersize=3, color=_colour(method),
                  label=_title(method))
        lo, hi = [min(by_x[x]) for x in xs], [max(by_x[x]) for x in xs]
        if lo != hi:
            left.fill_between(xs, lo, hi, color=_colour(method), alpha=0.15, linewidth=0)
    if curve_params:
        left.set_title(f"Learning curves: pass@1 on held-out prompts (n={curve_params['n']}, "
                       f"T={curve_params['temperature']})", fontsize=10)
        left.legend(fontsize=8, loc="best")
    else:
        left.text(0.5, 0.5, "no learning curves\n(train with curve_every > 0)", ha="center", va="center",
                  transform=left.transAxes)
    left.set_xlabel("training samples (sequences in the gradient)")
    left.set_ylabel("pass@1")
    left.grid(True, alpha=0.3)

    for run in runs:
        if run.cost is None:
            continue
        right.scatter(run.cost.get("samples_generated", 0), run.result["pass@k"]["1"], color=_colour(run.method),
                      s=28, label=_title(run.method))
    base = summary["methods"].get(BASE_RUN)
    if base:
        right.axhline(base["metrics"]["pass@1"]["mean"], color="black", linestyle="--", linewidth=1,
                      label=_title(BASE_RUN))
    handles, labels = right.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    if unique:
        right.legend(unique.values(), unique.keys(), fontsize=8, loc="best")
    first = runs[0].result
    right.set_title(f"Final pass@1 ({first['n_problems']} problems, n={first['n']}) against samples generated",
                    fontsize=10)
    right.set_xlabel("samples generated to train")
    right.set_ylabel("pass@1")
    right.grid(True, alpha=0.3)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def write_comparison(runs: Sequence[Run], out_dir, *, warnings: list[str], command: str | None = None,
                     tolerance: float = DEFAULT_TOLERANCE, extra: dict | None = None) -> dict[str, Path]:
    """``report.md``, ``report.json``, ``passk_majk.png`` and ``accuracy_vs_samples.png`` in ``out_dir``."""
    out = Path(out_dir)
    summary = summarize(runs)
    found = findings(runs, tolerance)
    methods = [m for m in summary["methods"] if m != BASE_RUN]
    payload = {
        "command": command,
        "task": runs[0].result["task_id"],
        "settings": {k: v for k, v in settings_of(runs[0].result).items() if k != "problems"},
        "params": runs[0].result["params"],
        "tolerance": tolerance,
        "warnings": warnings,
        "paradigm": paradigm_rows(methods),
        "summary": summary,
        "findings": found,
        "runs": [r.to_dict() for r in runs],
        **(extra or {}),
    }
    return {
        "md": atomic_write_text(out / REPORT_MD, render_markdown(runs, summary, found, warnings, command=command,
                                                                 tolerance=tolerance)),
        "json": atomic_write_text(out / REPORT_JSON, json.dumps(payload, indent=2, default=str) + "\n"),
        "passk_png": atomic_write_bytes(out / PASSK_PNG, plot_passk_majk(summary)),
        "samples_png": atomic_write_bytes(out / SAMPLES_PNG, plot_accuracy_vs_samples(runs, summary)),
    }
