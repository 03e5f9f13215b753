"""`make docs`: every table of results or measurements in the docs, rendered from the committed JSON it reports.

A doc holds marked blocks::

    <!-- render: compare_signal -->
    (whatever the renderer wrote last time)
    <!-- /render -->

and ``python scripts/render_docs.py`` rewrites each block's body with what the renderer registered under that name
returns from its JSON files (``--check``: write nothing, list the stale blocks, exit 1). A renderer is a function
``f(*sources) -> str`` registered with :func:`renderer` and the paths (from the repository root) of the files it
reads; the body ends with a line naming them. To add a block: write a renderer here, put the markers in the doc, run
``make docs``; ``tests/test_docs.py`` fails when a block differs from what its files render (stale numbers), names no
renderer, or when a renderer is used by no doc.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path

from grpo_ext.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<!-- render: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- /render -->)", re.DOTALL)
RENDERERS: dict[str, tuple[Callable[..., str], tuple[str, ...]]] = {}


def renderer(name: str, *sources: str):
    """Register ``f(*json_of_sources) -> markdown`` as block ``name`` (a ``.json`` source is parsed, others read)."""

    def register(f):
        if name in RENDERERS:
            raise ValueError(f"render block {name!r} registered twice")
        RENDERERS[name] = (f, sources)
        return f

    return register


class UnknownRenderer(UserError, KeyError):
    """A block naming no registered renderer (a `UserError`: one line through `run_cli`; a `KeyError` as before)."""

    __str__ = UserError.__str__  # the message as written, not KeyError's quoted repr


@cache
def _load(root: Path, source: str):
    """A source's text (a ``.json`` one parsed); a `UserError` naming the file when it is missing or not JSON."""
    try:
        text = (root / source).read_text()
        return json.loads(text) if source.endswith(".json") else text
    except OSError as err:
        raise UserError(f"{source}: cannot be read ({err.strerror or type(err).__name__})") from err
    except UnicodeDecodeError as err:
        raise UserError(f"{source}: not UTF-8 text ({err.reason} at byte {err.start})") from err
    except json.JSONDecodeError as err:
        raise UserError(f"{source}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno})") from err


def render_block(name: str, root: Path = ROOT) -> str:
    """Block ``name``'s body from its sources; a `UserError` naming the renderer and its files when one is missing,
    is not JSON, or does not hold what the renderer reads (a key, an entry or a type it expects)."""
    if name not in RENDERERS:
        raise UnknownRenderer(f"no renderer named {name!r} (scripts/render_docs.py: {', '.join(sorted(RENDERERS))})")
    f, sources = RENDERERS[name]
    data = [_load(root, s) for s in sources]
    try:
        body = f(*data).strip("\n")
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, ZeroDivisionError) as err:
        if isinstance(err, UserError):
            raise
        what = f"{type(err).__name__}: {err}"
        raise UserError(f"render block {name!r}: {', '.join(sources)} do not hold what it reads ({what})") from err
    return f"{body}\n\n*Rendered by `make docs` from {', '.join(f'`{s}`' for s in sources)}.*\n"


def render_text(text: str, root: Path = ROOT) -> str:
    """The doc with every marked block's body replaced by its renderer's output."""
    return BLOCK.sub(lambda m: m.group(1) + render_block(m.group("name"), root) + m.group(4), text)


def blocks(text: str) -> list[str]:
    return [m.group("name") for m in BLOCK.finditer(text)]


def doc_files(root: Path = ROOT) -> list[Path]:
    """The files that may hold blocks: the README, docs/, results/**/README.md, benchmarks/README.md."""
    found = [root / "README.md", *sorted((root / "docs").rglob("*.md")), *sorted((root / "results").rglob("README.md"))]
    found.append(root / "benchmarks" / "README.md")
    return [p for p in found if p.is_file()]


def _in_doc(path: Path, root: Path, render, *args):
    """``render(*args)``, its `UserError` prefixed with the doc that holds the block (``docs/a.md: ...``)."""
    try:
        return render(*args)
    except UserError as err:
        kind = UnknownRenderer if isinstance(err, UnknownRenderer) else UserError
        raise kind(f"{path.relative_to(root)}: {err}") from err


def stale(root: Path = ROOT) -> list[str]:
    """``path: block`` for every block whose body differs from what its files render now."""
    out = []
    for path in doc_files(root):
        text = path.read_text()
        for m in BLOCK.finditer(text):
            rendered = _in_doc(path, root, render_block, m.group("name"), root)
            if m.group("body") != rendered:
                out.append(f"{path.relative_to(root)}: {m.group('name')}")
    return out


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; list stale blocks and exit 1 if any")
    args = parser.parse_args(argv)
    if args.check:
        found = stale(root)
        print("\n".join(found) if found else "every rendered block is up to date")
        return 1 if found else 0
    for path in doc_files(root):
        text = path.read_text()
        new = _in_doc(path, root, render_text, text, root)
        if new != text:
            path.write_text(new)
            print(f"rendered {path.relative_to(root)}: {', '.join(blocks(text))}")
    return 0


# ---- number formats ---------------------------------------------------------------------------------------------


def f3(x: float) -> str:
    return f"{x:.3f}"


def sgn(x: float) -> str:
    return f"{x:+.3f}"


def count(n: int) -> str:
    return f"{n:,}"


def ci(d: dict, key: str = "difference", sign: bool = True, bold: bool = False) -> str:
    """``+0.007 [+0.001, +0.013]`` from a difference entry; bold (when asked) where the interval excludes 0."""
    form = sgn if sign else f3
    text = f"{form(d[key])} [{form(d['low'])}, {form(d['high'])}]"
    return f"**{text}**" if bold and (d["low"] > 0 or d["high"] < 0) else text


def seeds(values, form=sgn) -> str:
    return ", ".join(form(v) for v in values)


def table(header: list[str], rows: list[list], align: list[str] | None = None) -> str:
    align = align or ["---"] * len(header)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def lr(x: float) -> str:
    """``5e-5``, ``1.5e-4``, ``1e-3`` as the docs write learning rates."""
    mantissa, exponent = f"{x:e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


ARM_NAMES = {
    "sft": "SFT",
    "rft": "RFT",
    "online_rft": "online RFT",
    "dpo": "DPO",
    "grpo_outcome": "GRPO outcome",
    "grpo_process": "GRPO process",
    "outcome_skip": "outcome + skip",
    "outcome_refill": "outcome + refill",
    "outcome_fixed_beta": "fixed β",
    "outcome_adaptive_beta": "adaptive β",
    "process_refill": "process + refill",
    "base": "base",
    "fewshot8": "8 worked examples",
}


def pick_text(pick: dict) -> str:
    return lr(pick["lr"]) + (f", β {pick['beta']:g}" if "beta" in pick else "")


# ---- the embedded default -----------------------------------------------------------------------------------------

BASE_METRICS = "grpo_ext/assets/embedded/base_model_metrics.json"


@renderer("embedded_base", BASE_METRICS)
def embedded_base(m: dict) -> str:
    rows = [
        [f"{s}{' (seen in training)' if s == 'sft' else ' (RL' + chr(39) + 's prompts)' if s == 'train' else ''}", m[s]]
        for s in ("sft", "train", "validation", "test")
    ]
    rows += [
        ["validation, loaded in 4 bit (nf4, the main job's load)", m["four_bit"]["validation"]],
        ["test, loaded in 4 bit", m["four_bit"]["test"]],
    ]
    first = m["test"]
    body = table(
        ["split", "pass@1", f"pass@{first['n']}", f"maj@{first['n']}", "greedy"],
        [[name, f3(r["pass@1"]), f3(r[f"pass@{r['n']}"]), f3(r[f"maj@{r['n']}"]), f3(r["greedy"])] for name, r in rows],
        ["---", "---:", "---:", "---:", "---:"],
    )
    t, c = m["targets"], m["convergence_check"]
    met = {True: "met", False: "**not met**"}
    return (
        f"{count(first['n_prompts'])} problems a split, n = {first['n']}, T = {first['temperature']:g}:\n\n{body}\n\n"
        f"Targets: held-out pass@1 in [{t['held_out_pass@1']['target'][0]}, {t['held_out_pass@1']['target'][1]}] "
        f"({f3(t['held_out_pass@1']['value'])}, {met[t['held_out_pass@1']['met']]}); memorisation gap <= "
        f"{t['memorisation_gap']['target']} ({f3(t['memorisation_gap']['value'])}, "
        f"{met[t['memorisation_gap']['met']]});"
        f" pass@16 - pass@1 >= {t['room_for_rl']['target']} ({t['room_for_rl']['value']:.2f}, "
        f"{met[t['room_for_rl']['met']]}); the 4-bit load losing <= {t['four_bit_loss']['target']} of held-out pass@1 "
        f"({f3(m['four_bit_loss']['validation'])} / {f3(m['four_bit_loss']['test'])}, "
        f"{met[t['four_bit_loss']['met']]});"
        f" converged: {met[t['converged']['met']]} (one more epoch at lr {m['sft_training']['check_lr']:g}: validation "
        f"pass@1 {sgn(c['validation']['change'])}, test {sgn(c['test']['change'])}, against an evaluation noise of "
        f"{c['validation']['evaluation_noise']:.3f})."
    )


# ---- the fair stage (results/compare) -----------------------------------------------------------------------------


@renderer("compare_signal", "results/compare/signal.json")
def compare_signal(s: dict) -> str:
    arm_samples = s["settings"]["arm_samples"]
    by = {(r["objective"], r["samples"]): r for r in s["rows"]}
    rows = []
    for n in s["settings"]["samples"]:
        cells = [f"{ci(by[(o, n)], 'mean_cosine')}" for o in ("grpo", "sft")]
        if n == arm_samples:
            rows.append([f"**{count(n)} (the arms)**", f"**{cells[0]}**", cells[1]])
        else:
            rows.append([count(n), *cells])
    arm = by[("grpo", arm_samples)]
    return (
        f"Mean gradient cosine between {s['settings']['minibatches']} independent minibatches of fresh train prompts, "
        f"95% jackknife interval; GRPO with the arm's groups of {s['settings']['num_generations']} at T = "
        f"{s['settings']['temperature']:g} ({arm['zero_std_share']:.0%} of its groups at {count(arm_samples)} samples "
        f"have no reward variance):\n\n" + table(["samples a step", "GRPO", "SFT"], rows, ["---:", "---", "---"])
    )


@renderer("compare_search", "results/compare/search.json")
def compare_search(s: dict) -> str:
    v = s["validation"]
    rates = [g["lr"] for g in s["grid"]["sft"]]
    rows = []
    for arm in ("sft", "rft", "online_rft", "dpo", "grpo_outcome"):
        pick = s["picks"][arm]["slug"]
        cells = []
        for rate in rates:
            slugs = [slug for slug in s["scores"][arm] if slug.split("_")[0] == f"lr{rate:g}"]
            cells.append(
                " / ".join(f"**{f3(s['scores'][arm][x])}**" if x == pick else f3(s["scores"][arm][x]) for x in slugs)
            )
        betas = sorted({g["beta"] for g in s["grid"][arm] if "beta" in g})
        name = ARM_NAMES[arm] + (f", β {' / '.join(f'{b:g}' for b in betas)}" if betas else "")
        rows.append([name + (" (the family's rate)" if arm == "grpo_outcome" else ""), *cells])
    body = table(["arm", *(f"lr {lr(r)}" for r in rates)], rows, ["---", *["---:"] * len(rates)])
    extensions = [a for a, r in s["rate_of"].items()]
    ext = ", ".join(f"{ARM_NAMES[a]} {f3(next(iter(s['scores'][a].values())))}" for a in extensions)
    return (
        f"Validation, {count(v['limit'])} problems x {v['n']}, T = {v['temperature']:g}, search seed "
        f"{s['search_seed']}; "
        f"base pass@1 {f3(s['base'])}; the pick in bold:\n\n{body}\n\n"
        f"The GRPO extension arms, at {lr(s['rate_of'][extensions[0]]['lr'])} (`rate_of: grpo_outcome`): {ext}."
    )


@renderer("compare_test", "results/compare/report.json")
def compare_test(r: dict) -> str:
    k = r["k_max"]
    picks = r["search"]["picks"]
    seeds_ = r["search"]["test_seeds"]
    b = r["base"]
    rows = [
        [
            "base",
            "",
            f"{f3(b['pass@1']['mean'])} [{f3(b['pass@1']['low'])}, {f3(b['pass@1']['high'])}]",
            f3(b[f"maj@{k}"]["mean"]),
            f3(b[f"pass@{k}"]["mean"]),
            "",
        ]
    ]
    for arm, a in r["arms"].items():
        m = a["metrics"]
        rows.append(
            [
                ARM_NAMES[arm],
                pick_text(picks[arm]),
                ci(m["pass@1"], "mean", sign=False),
                f3(m[f"maj@{k}"]["mean"]),
                f3(m[f"pass@{k}"]["mean"]),
                f"{count(a['trained_sequences'][0])} / {count(a['samples_generated'][0])}",
            ]
        )
    return (
        f"Each pick trained at seeds {', '.join(map(str, seeds_))}; means over the seeds with 95% bootstrap intervals "
        f"over problems:\n\n"
        + table(
            ["arm", "pick", "pass@1", f"maj@{k}", f"pass@{k}", "trained / generated samples a seed"],
            rows,
            ["---", "---", "---:", "---:", "---:", "---:"],
        )
    )


def _expectation_rows(r: dict) -> list[list[str]]:
    rows = []
    for e in r["expectations"]:
        d = e["difference"]
        measured = ci(d) + f" (seeds {seeds(d['per_seed'])})"
        if e.get("minus"):
            measured = f"({e['metric']} gain) - ({e['minus']} gain) " + measured
        rows.append([e["text"], measured, e["verdict"], "yes" if e["held"] else "no"])
    return rows


@renderer("compare_expectations", "results/compare/report.json")
def compare_expectations(r: dict) -> str:
    held = sum(e["held"] for e in r["expectations"])
    body = table(["expectation", "measured (paired, seeds)", "verdict", "held"], _expectation_rows(r))
    findings = "; ".join(
        f"{f['claim']}: {f['verdict']} ("
        + (ci(f["pass@1"]) if "pass@1" in f else ", ".join(f"K = {x['k']} {ci(x)}" for x in f["by_k"]))
        + ")"
        for f in r["findings"]
    )
    return (
        f"{held} of {len(r['expectations'])} expectations held.\n\n{body}\n\nDeepSeekMath's findings here: {findings}."
    )


# ---- the main job's search --------------------------------------------------------------------------------------


@renderer(
    "main_job_search",
    "results/main_job_search/search.json",
    "results/main_job_search/base_validation/report.json",
    "results/stage_design/qlora_4bit_eval.json",
)
def main_job_search(s: dict, base: dict, four_bit: dict) -> str:
    v = s["validation"]
    n = v["n"]
    rows = [
        ["base (fp32)", f3(s["base_score"]), f3(base["models"][0]["pass@k"][str(n)])],
        ["base loaded in 4 bit, no adapter", f3(four_bit["base"]), ""],
    ]
    for slug, score in s["scores"].items():
        rate, temp = (part.split("=")[1] for part in slug.split(","))
        name = f"{rate}, {temp}"
        rows.append([f"**{name} (pick)**" if slug == s["pick"]["slug"] else name, f3(score), f3(s["pass@n"][slug])])
    gains = [score - four_bit["base"] for score in s["scores"].values()]
    return (
        f"Validation, {count(v['limit'])} problems, n = {n}, T = {v['temperature']:g}, search seed "
        f"{s['search_seed']}:\n\n"
        + table(
            ["setting (lr, training T)", "validation pass@1", f"validation pass@{n}"], rows, ["---", "---:", "---:"]
        )
        + f"\n\nEvery adapter gains {sgn(min(gains))} to {sgn(max(gains))} over the base loaded in 4 bit; on test the "
        f"pick scores {f3(s['test']['pick'])} against the fp32 base's {f3(s['test']['base'])}."
    )


# ---- iterative RL -----------------------------------------------------------------------------------------------

ITERATIVE_REWARDS = {
    "verifier": "the rule-based step verifier",
    "iterative": "PRM retrained every iteration",
    "frozen": "PRM_0 kept",
}


@renderer("iterative", "results/iterative/report.json")
def iterative(r: dict) -> str:
    s = r["summary"]
    rows = []
    for arm in ("verifier", "iterative", "frozen"):
        a = s["against_base"][arm]
        means = s["means"][arm]
        first, last = means[0], means[-1]
        mean = a["mean"]
        rows.append(
            [
                arm,
                ITERATIVE_REWARDS[arm],
                f"{f3(first['pass@1']['mean'])} → {f3(last['pass@1']['mean'])}",
                ci(mean, "estimate", bold=True),
                seeds(x["estimate"] for x in a["per_seed"].values()),
            ]
        )
    return (
        f"Test pass@1, iteration {means[-1]['iteration']} minus the base (paired by problem, mean of "
        f"{means[-1]['seeds']} seeds):\n\n"
        + table(["arm", "reward", f"base → iteration {means[-1]['iteration']}", "change [95% CI]", "seeds"], rows)
    )


# ---- performance ------------------------------------------------------------------------------------------------


def measured_table(b: dict) -> str:
    """A benchmark's own table under the date it was measured (its JSON's `date` and `table`)."""
    return f"Measured {b['date'][:10]}:\n\n{b['table']}"


# the benchmarks that write their own table: one block each, the same rendering
for _name, _source in [
    ("real_step", "benchmarks/results/real_step.json"),
    ("real_step_2026_11_26", "benchmarks/results/real_step_2026-11-26.json"),
    ("real_step_issue49", "benchmarks/results/real_step_issue49.json"),
    ("lora_sampling", "benchmarks/results/lora_sampling.json"),
    ("eval_real", "benchmarks/results/eval_real.json"),
]:
    renderer(_name, _source)(measured_table)


#: Rows of `summary.json` timed on the first design's 1 M-parameter base, left out until re-run on the shipped one.
FIRST_DESIGN_BENCHMARKS = ("overhead.py", "eval_throughput.py")


@renderer("benchmarks_summary", "benchmarks/results/summary.json")
def benchmarks_summary(s: dict) -> str:
    rows = [[*row[:5], row[5], row[6][:10]] for row in s["rows"] if row[0] not in FIRST_DESIGN_BENCHMARKS]
    return table(["benchmark", "measure", "value", "target", "result", "load avg (1/5/15 min)", "date"], rows)


GPU_DIR = "benchmarks/results/gpu_2026-11-24"


@renderer("gpu_sampling", f"{GPU_DIR}/gpu_sampling.json")
def gpu_sampling(b: dict) -> str:
    methods = ["ours", "ours_static", "ours_compiled", "generate", "generate_static"]
    rows = []
    for r in b["results"]:
        ratio = 1 / r["time_over_generate_static"]["ours_compiled"]["median_of_ratios"]
        rows.append(
            [
                f"{r['prompts']} x {r['samples_per_prompt']} ({r['slots']} slots)",
                *(f"{r['samples_per_second'][m]:.1f}" for m in methods),
                f"{ratio:.2f}x",
            ]
        )
    header = [
        "prompts x samples",
        "ours eager",
        "ours static",
        "ours compiled",
        "generate",
        "generate(static)",
        "compiled / generate(static)",
    ]
    device = b["device"]
    return (
        f"Samples/s ({device['name']}, torch {device['torch']}, {b['date'][:10]}; the last column: the median over "
        f"repetitions of the time ratio, inverted):\n\n" + table(header, rows, ["---", *["---:"] * 6])
    )


@renderer("gpu_step", f"{GPU_DIR}/gpu_step_0.5b.json", f"{GPU_DIR}/gpu_step_1.5b.json")
def gpu_step(*shapes: dict) -> str:
    rows = []
    for b in shapes:
        cells, static = [], []
        for kind in ("full", "lora", "qlora"):
            v = b["kinds"][kind]["variants"]
            off = v["off"]["seconds"]["median"]
            cells.append(f"{off:.3g} s, {v['off']['peak_bytes'] / 2**30:.1f} GiB")
            static.append(f"{b['kinds'][kind]['time_over_off']['static']['median_of_ratios']:.2f}x")
        rows.append([b["shape"].replace("b", "B"), *cells, " / ".join(static)])
    header = ["shape", "full", "LoRA", "QLoRA", "TRL `cache_implementation: static`, time / off (full, LoRA, QLoRA)"]
    return table(header, rows)


# ---- the real-model study (results/real_study) and the withdrawn first result -------------------------------------


@renderer("real_study_test", "results/real_study/report.json")
def real_study_test(r: dict) -> str:
    k = 4
    picks = r["search"]["picks"]
    by_slice = {s["value"]: s for s in r["slices"][r["slice_attribute"]]}
    plus, minus = by_slice["+"], by_slice["-"]

    def row(name, key, m, seed_entry=None):
        cells = [name, ci(m["pass@1"], "mean", sign=False)]
        cells.append(seeds(seed_entry["per_seed"], f3) if seed_entry else "")
        cells.append(f"[{f3(seed_entry['low'])}, {f3(seed_entry['high'])}]" if seed_entry else "")
        for s in (plus, minus):
            cells.append(f3(s["base"]) if key == "base" else ci(s["arms"][key]["difference"], bold=True))
        cells += [f3(m[f"maj@{k}"]["mean"]), f3(m[f"pass@{k}"]["mean"])]
        return cells

    rows = [
        row("base (2 worked examples)", "base", r["base"]),
        row("8 worked examples", "fewshot8", r["baselines"]["fewshot8"]),
    ]
    for arm, a in r["arms"].items():
        rate = f"lr {lr(picks[arm]['lr'])}"
        if arm == "dpo":
            rate += f", beta {picks[arm]['beta']:g}"
        name = {"grpo_process": "GRPO process (outcome's lr)", "outcome_refill": "GRPO outcome + refill (outcome's lr)"}
        name = name.get(arm, f"{ARM_NAMES[arm]} ({rate})")
        rows.append(row(name, arm, a["metrics"], r["seeds"][arm]))
    header = ["run", "pass@1 [problems]", "per seed", "over seeds and problems", "`+`", "`-`", f"maj@{k}", f"pass@{k}"]
    return (
        f"{plus['n_problems']} additions and {minus['n_problems']} subtractions; each pick trained with seeds "
        f"{', '.join(map(str, r['search']['test_seeds']))}:\n\n"
        + table(header, rows, ["---", "---:", "---", "---:", "---:", "---:", "---:", "---:"])
    )


@renderer("real_study_expectations", "results/real_study/report.json")
def real_study_expectations(r: dict) -> str:
    rows = _expectation_rows(r)
    for e, row in zip(r["expectations"], rows, strict=True):
        if e.get("by_slice"):
            row[1] = "; ".join(f"`{s['value']}` {ci(s['difference'])}" for s in e["by_slice"])
    held = sum(e["held"] for e in r["expectations"])
    return f"{held} of {len(r['expectations'])} expectations held.\n\n" + table(
        ["expectation", "difference [95% over problems] (seeds)", "verdict", "held"], rows
    )


@renderer("real_study_budget", "results/real_study/report.json")
def real_study_budget(r: dict) -> str:
    def each(a: dict, key: str, digits: int = 0) -> str:
        return " / ".join(count(c[key]) if not digits else f"{c[key]:.{digits}g}" for c in a["counts"])

    rows = [
        [
            ARM_NAMES[arm],
            each(a, "optimizer_steps"),
            each(a, "trained_sequences"),
            each(a, "unique_sequences"),
            each(a, "epochs", 2),
            each(a, "samples_generated"),
        ]
        for arm, a in r["arms"].items()
    ]
    header = ["arm", "optimizer steps", "gradient samples", "unique sequences", "epochs", "generated samples"]
    return "Seeds 0 / 1 / 2 in each cell.\n\n" + table(header, rows)


def _validation(path: str) -> dict:
    return _load(ROOT, path)


def _accuracy(report: dict, operation: str | None = None) -> list[float]:
    return [
        p["n_correct"] / report["n"]
        for p in report["per_problem"]
        if operation is None or p["attributes"]["operation"] == operation
    ]


@renderer("real_study_validation", "results/real_study/search.json")
def real_study_validation(s: dict) -> str:
    """The search's runs on validation, each from its ``validation.json`` (paired with the base's by problem)."""
    from grpo_ext.evaluation.bootstrap import bootstrap_paired_difference_ci

    v = s["validation"]
    where = "results/real_study"
    base = _validation(f"{where}/base/validation.json")
    runs = [
        ("base (2 worked examples)", base),
        ("8 worked examples", _validation(f"{where}/baselines/fewshot8/validation.json")),
    ]
    for arm, grid in s["grid"].items():
        for slug in s["scores"][arm]:
            setting = next(g for g in grid if slug == "_".join(f"{k}{g[k]:g}" for k in g))
            name = f"{ARM_NAMES[arm]} lr {lr(setting['lr'])}" + (
                f", beta {setting['beta']:g}" if "beta" in setting else ""
            )
            if arm in s.get("rate_of", {}):
                name = f"{ARM_NAMES[arm]} (at {ARM_NAMES[s['rate_of'][arm]['arm']]}'s lr {lr(setting['lr'])})"
            elif slug == s["picks"][arm]["slug"]:
                name = f"**{name}** (pick)"
            runs.append((name, _validation(f"{where}/runs/{arm}/{slug}/seed{s['search_seed']}/validation.json")))
    rows = []
    for name, report in runs:
        d = bootstrap_paired_difference_ci(_accuracy(report), _accuracy(base))
        diff = "" if report is base else ci({"difference": d.estimate, "low": d.low, "high": d.high}, bold=True)
        per_op = [f3(sum(x) / len(x)) for x in (_accuracy(report, "+"), _accuracy(report, "-"))]
        rows.append([name, f3(report["pass@k"]["1"]), diff, *per_op, f"{report['strict_share']:.2f}"])
    header = ["run", "pass@1", "minus the base [95%]", "`+`", "`-`", "strict form"]
    return (
        f"Validation, {v['limit']} problems x {v['n']}, T {v['temperature']:g}, seed {s['search_seed']}; each run's "
        f"`validation.json` in `{where}/runs/<arm>/<setting>/seed{s['search_seed']}/` (read by the renderer too):\n\n"
        + table(header, rows, ["---", "---:", "---:", "---:", "---:", "---:"])
    )


@renderer("real_search_by_operation", "results/real_search/test/report.json")
def real_search_by_operation(r: dict) -> str:
    paired = r["paired_slices"][0]["slices"]["operation"]
    n = r["models"][0]["n"]
    rows = []
    for s in paired:
        d = s["difference"]["pass@k"]
        rows.append(
            [
                f"`{s['value']}`",
                s["n_problems"],
                f3(s["a"]["pass@k"]["1"]),
                f3(s["b"]["pass@k"]["1"]),
                ci(d["1"], bold=True),
                ci(d[str(n)], bold=True),
            ]
        )
    header = ["operation", "problems", "base pass@1", "RL pass@1", "paired difference", f"difference in pass@{n}"]
    return table(header, rows, ["---", "---:", "---:", "---:", "---:", "---:"])


if __name__ == "__main__":
    from grpo_ext.cli import run_cli

    run_cli(lambda argv: sys.exit(main(argv)))  # a missing or junk source, an unknown block: one line, exit 2
