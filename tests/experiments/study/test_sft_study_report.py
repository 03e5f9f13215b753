"""The report of configs/real/sft_study.yaml, built from hand-made records: the arms from a start labelled "SFT start"
(scored at n = 64), arms at n = 16, the raw base as a baseline at n = 4 with a text, a question among the
expectations."""

from __future__ import annotations

import json
from pathlib import Path

from grpo_ext.experiments.study.config import load_study
from grpo_ext.experiments.study.expectations import Expectation, held_count, judge_expectations, render_expectations
from grpo_ext.experiments.study.report import compute
from grpo_ext.experiments.study.report_md import _design, render
from grpo_ext.experiments.study.seeds import render_seed_spread
from grpo_ext.experiments.study.spec import Setting
from grpo_ext.experiments.study.stages import write_expectations

ROOT = Path(__file__).resolve().parents[3]
SFT_STUDY = ROOT / "configs" / "real" / "sft_study.yaml"
PROBLEMS = 20


def _result(right: list[float], n: int) -> dict:
    """A harness result at n samples a problem: problem i right in the share right[i % len(right)] of them, half
    additions and half subtractions, maj@k right where more than half are."""
    ks = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= n]
    rows = []
    for i in range(PROBLEMS):
        correct = round(right[i % len(right)] * n)
        maj = {str(k): float(correct > n / 2) for k in ks}
        rows.append({"problem_id": i, "n_correct": correct, "n_extracted": n, "maj@k": maj,
                     "attributes": {"operation": "+-"[i % 2]}})  # fmt: skip
    return {"n": n, "ks": ks, "n_problems": PROBLEMS, "per_problem": rows}


def _arm(*seeds: list[float], online: bool) -> dict:
    return {"results": [_result(s, 16) for s in seeds], "curves": [None] * len(seeds), "online": online}


def _data() -> dict:
    return {
        "arms": {
            "more_sft": _arm([0.5, 0.25], [0.5, 0.5], [0.25, 0.5], online=False),
            "grpo_outcome": _arm([0.75, 1.0], [1.0, 0.75], [0.75, 0.75], online=True),
        },
        "base": _result([0.5, 0.25], 64),
        "baselines": {"raw_base": _result([0.0, 0.25], 4)},
        "validation_sizes": {},
    }


SEARCH = {
    "scores": {"grpo_outcome": {"lr0.0003": 0.6}},
    "picks": {"grpo_outcome": {"slug": "lr0.0003", "lr": 3e-4}, "more_sft": {"slug": "lr0.0003", "lr": 3e-4}},
    "rate_of": {"more_sft": {"arm": "grpo_outcome", "lr": 3e-4}},
}


def _report() -> tuple[dict, str]:
    study = load_study(SFT_STUDY)
    stats = compute(study, _data())
    return stats, render(study, SEARCH, stats, None)


def test_a_baseline_drawn_fewer_samples_than_the_arms_k_is_scored_at_its_own_k_and_shows_a_dash():
    stats, md = _report()
    assert stats["k_max"] == 16 and set(stats["base"]) == {"pass@1", "maj@16", "pass@16"}
    # the raw base drew 4 samples a problem: maj@4 / pass@4 in report.json, no maj@16 / pass@16 to show
    assert set(stats["baselines"]["raw_base"]) == {"pass@1", "maj@4", "pass@4"}
    assert stats["baselines"]["raw_base"]["pass@1"]["mean"] == 0.125
    row = next(line for line in md.splitlines() if line.startswith("| raw_base (baseline) |"))
    assert row.endswith("| - | - | - | - |") and "0.125" in row
    start = next(line for line in md.splitlines() if line.startswith("| SFT start | - |"))
    assert start.count("[") == 3  # the start at n = 64 has all three at K = 16


def test_a_question_is_answered_by_the_studys_rule_and_not_counted_as_held():
    study = load_study(SFT_STUDY)
    assert [name for name, e in study.expectations.items() if e.question] == ["outcome_vs_more_sft"]
    stats, md = _report()
    rows = {row["name"]: row for row in stats["expectations"]}
    # grpo_outcome above more_sft by the rule: "yes", where it used to read "held" like a prediction
    assert rows["outcome_vs_more_sft"]["answer"] == "yes" and rows["outcome_vs_more_sft"]["held"] is True
    assert "| **yes: grpo_outcome is above more_sft** (agrees) |" in md
    # the two about the start held, the question is out of the count, the other five were not measured
    assert held_count(stats["expectations"]) == (2, 7) and "2 of 7 expectations held. 1 question is answered" in md
    # the reverse by the same rule: "no"; a difference the rule cannot call: "cannot tell"
    arms = {a: entry["results"] for a, entry in _data()["arms"].items()}
    ask = Expectation("q", "more_sft", "grpo_outcome", "pass@1", "text", question=True)
    (row,) = judge_expectations({"q": ask}, arms, None)
    assert (row["verdict"], row["answer"]) == ("disagrees", "no")
    assert "| **no: grpo_outcome is above more_sft** (disagrees) |" in "\n".join(render_expectations([row]))
    ask = Expectation("q", "more_sft", "base", "pass@1", "text", question=True)
    (row,) = judge_expectations({"q": ask}, arms, _data()["base"])
    assert (row["verdict"], row["answer"]) == ("inconclusive", "cannot tell")
    text = "\n".join(render_expectations([row], "SFT start"))
    assert "| **cannot tell** (inconclusive) |" in text and "0 of 0 expectations held" in text


def test_every_section_names_the_start_where_it_said_base():
    _, md = _report()
    assert "## Pass@k against the SFT start: the crossover" in md
    assert "| raw_base | 4 | the SFT start leads at k = 1; raw_base's pass@k never reaches the SFT start's" in md
    assert "2 (the SFT start leads), none, 2 (the SFT start leads)" in md
    assert "## pass@1 by slice: each arm against the SFT start" in md
    assert "| operation | problems | SFT start | raw_base | more_sft | grpo_outcome |" in md
    assert "| minus the SFT start, over seeds and problems |" in md
    assert "the base" not in md and "| base |" not in md


def test_expectations_md_names_the_start(tmp_path):
    """The file the driver writes beside the report (the baselines' and the slice expectations judged)."""
    study = load_study(SFT_STUDY).only(["grpo_outcome"])
    picks = {"grpo_outcome": Setting((("lr", 3e-4),))}
    data = _data()
    files = {"base": data["base"], "baselines/raw_base": data["baselines"]["raw_base"]}
    for seed, result in zip(study.seeds, data["arms"]["grpo_outcome"]["results"], strict=True):
        files[f"runs/grpo_outcome/lr0.0003/seed{seed}"] = result
    for folder, result in files.items():
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "test.json").write_text(json.dumps(result))
    write_expectations(study, tmp_path, picks)
    text = (tmp_path / "expectations.md").read_text()
    assert "| pass@1: grpo_outcome - SFT start | +0.100 |" in text and "- base" not in text


def test_the_prose_counts_the_searched_axes_and_the_seed_draws():
    _, md = _report()
    # sft_study searches the learning rate alone (DPO trains at grpo_outcome's rate with the config's beta)
    assert "the same learning-rate search (0.0001, 0.0003, 0.001)." in md and "beta" not in md
    compare = _design(load_study(ROOT / "configs" / "compare.yaml"))
    assert "learning-rate search (5e-05, 0.00015, 0.0004; dpo also searches beta (0.03, 0.1, 0.3))." in compare
    # s seeds drawn with replacement: C(2s - 1, s) distinct draws
    assert "With 3 seeds the seed level has 10 distinct draws: coarse" in md
    row = {"metric": "pass@1", "mean": 0.5, "low": 0.4, "high": 0.6, "minus_base": {"difference": 0.1, "low": 0.0,
           "high": 0.2}}  # fmt: skip
    text = "\n".join(render_seed_spread({"a": {**row, "per_seed": [0.5] * 2}, "b": {**row, "per_seed": [0.5] * 4}}))
    assert "With 4 seeds the seed level has 35 distinct draws (with 2 seeds the seed level has 3 distinct" in text


def test_each_baseline_is_described_under_the_test_table_in_the_studys_words():
    _, md = _report()
    table, after = md.split("## Test results of the picks", 1)[1].split("\n\n", 2)[1:]
    assert table.splitlines()[-1].startswith("| grpo_outcome |")
    assert after.startswith(
        "- raw_base (baseline): the raw base before SFT, with 2 worked examples in its prompt (as the earlier study "
        "scored it): context\n\n"
    )
