"""The SFT-start study's blocks (``results/sft_study``, issue 48): grpo_outcome's learning-rate search on validation,
each run beside the start it trained from, and what its training log says it saw."""

from __future__ import annotations

from grpo_ext.experiments.study.dynamics import training_steps
from scripts.doc_blocks.formats import ci, f3, lr, table
from scripts.doc_blocks.real_study import _accuracy, _validation
from scripts.doc_blocks.registry import ROOT, load_source, renderer

WHERE = "results/sft_study"
#: Steps averaged at each end of a run's training log ("first / last" reward).
ENDS = 20


def _mean(entries: list[dict], key: str) -> float:
    values = [float(e[key]) for e in entries if e.get(key) is not None]
    return sum(values) / len(values)


@renderer("sft_study_search", f"{WHERE}/search.json")
def sft_study_search(s: dict) -> str:
    """grpo_outcome's search: a row per run (its ``validation.json`` paired by problem with the start's, and its
    ``training_log.json``), the setting's mean over the search seeds (what picked it) in bold for the pick."""
    from grpo_ext.evaluation.bootstrap import bootstrap_paired_difference_ci

    v = s["validation"]
    start = _validation(f"{WHERE}/base/validation.json")
    arm = "grpo_outcome"
    ops = [f3(sum(x) / len(x)) for x in (_accuracy(start, "+"), _accuracy(start, "-"))]
    rows = [["the SFT start", f3(start["pass@k"]["1"]), "", *ops, "", "", ""]]
    for slug, by_seed in s["scores_by_seed"][arm].items():
        setting = next(g for g in s["grid"][arm] if slug == "_".join(f"{k}{g[k]:g}" for k in g))
        for seed, score in zip(s["search_seeds"], by_seed, strict=True):
            folder = f"{WHERE}/runs/{arm}/{slug}/seed{seed}"
            report = _validation(f"{folder}/validation.json")
            d = bootstrap_paired_difference_ci(_accuracy(report), _accuracy(start))
            steps = training_steps(load_source(ROOT, f"{folder}/training_log.json"))
            reward = f"{f3(_mean(steps[:ENDS], 'reward'))} -> {f3(_mean(steps[-ENDS:], 'reward'))}"
            rows.append(
                [
                    f"lr {lr(setting['lr'])}, seed {seed}",
                    f3(score),
                    ci({"difference": d.estimate, "low": d.low, "high": d.high}, bold=True),
                    *(f3(sum(x) / len(x)) for x in (_accuracy(report, "+"), _accuracy(report, "-"))),
                    reward,
                    f"{_mean(steps, 'frac_reward_zero_std'):.2f}",
                    f"{_mean(steps, 'entropy'):.3f}",
                ]
            )
        mean = f3(s["scores"][arm][slug])
        picked = slug == s["picks"][arm]["slug"]
        rows.append([f"lr {lr(setting['lr'])}: mean of the seeds" + (" (pick)" if picked else ""),
                     f"**{mean}**" if picked else mean, "", "", "", "", "", ""])  # fmt: skip
    header = ["run", "pass@1", "minus the start [95%]", "`+`", "`-`", f"reward, first / last {ENDS} steps",
              "equal-reward groups", "entropy"]  # fmt: skip
    return (
        f"Validation, {v['limit']} problems x {v['n']}, T {v['temperature']:g}; the start {f3(s['base'])}. Each run's "
        f"`validation.json` and `training_log.json` in `{WHERE}/runs/{arm}/<setting>/seed<seed>/` (read by the "
        f"renderer too); the difference paired by problem with the start's; `+` / `-`: pass@1 on the additions / "
        f"subtractions; training reward, share of groups whose rewards were all equal and policy entropy (nats a "
        f"token) as TRL logged them each step:\n\n"
        + table(header, rows, ["---", "---:", "---:", "---:", "---:", "---", "---:", "---:"])
    )
