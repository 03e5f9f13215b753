"""The failure anatomy: format (truncated, no answer) against content (wrong arithmetic, wrong with right steps)."""

from __future__ import annotations

from pathlib import Path

import pytest

from grpo_ext.evaluation.failures import anatomy, anatomy_markdown, failure_kind, has_marked_answer
from grpo_ext.tasks.arithmetic import Problem
from grpo_ext.tasks.word_arithmetic import WordArithmeticTask, word_problem

TASK = WordArithmeticTask()
PROMPT = [{"role": "user", "content": TASK.build_prompt(word_problem(Problem((43, 17, 18), ("+", "-")))[0])}]


@pytest.mark.parametrize(
    ("completion", "n_tokens", "kind"),
    [
        ("43 + 17 = 60\n60 - 18 = 42\n#### 42", 20, "right"),
        ("43 + 17 = 60\n60 - 18 = 42\nThe answer is 42", 20, "right"),  # the last number, as GSM8K reads it
        ("43 + 17 = 60\n60 - 18 = 42\n#### 42", 64, "right"),  # right at the budget is still right
        ("43 + 17 = 60\n60 - 18 =", 64, "truncated"),
        ("Let me think about the apples.", 10, "no_answer"),
        ("43 + 17 = 61\n61 - 18 = 43\n#### 43", 20, "wrong_arithmetic"),
        ("43 + 17 = 60\n#### 60", 20, "wrong_other"),  # every step true, one operation left out
        ("So \\boxed{41}", 5, "wrong_other"),
    ],
)
def test_failure_kinds_by_hand(completion, n_tokens, kind):
    assert failure_kind(TASK, PROMPT, completion, "42", n_tokens, 64) == kind


def test_anatomy_counts_shares_and_the_format_share():
    a = anatomy(["right", "truncated", "no_answer", "no_answer", "wrong_arithmetic"])
    assert a["counts"] == {"right": 1, "truncated": 1, "no_answer": 2, "wrong_arithmetic": 1, "wrong_other": 0}
    assert a["shares"]["no_answer"] == 0.4 and a["format_share_of_failures"] == 0.75
    assert anatomy_markdown({"base": a})[-1] == "| base | 5 | 0.200 | 0.200 | 0.400 | 0.200 | 0.000 | 0.750 |"
    assert has_marked_answer("#### 7") and has_marked_answer("\\boxed{x}") and not has_marked_answer("#### ANSWER")


def test_the_script_classifies_a_harness_folder_by_model(tmp_path):
    """scripts/real_result.py's reading of a harness output folder: each model's samples, answers from the task."""
    import json

    from scripts.real_result import classify

    rows = TASK.load("test", 2)
    report = {"models": [{"model": m, "params": {"max_new_tokens": 4}, "n_problems": 2} for m in ("base", "rl")]}
    (tmp_path / "report.json").write_text(json.dumps(report))
    samples = [
        ("base", rows[0], "a b c d e"),  # 5 tokens >= 4: truncated
        ("base", rows[1], "no idea here"),  # 3 tokens, stopped: no answer
        ("rl", rows[0], f"#### {rows[0]['answer']}"),
        ("rl", rows[1], "#### 100000"),
    ]
    with (tmp_path / "samples.jsonl").open("w") as out:
        for model, row, completion in samples:
            out.write(json.dumps({"model": model, "prompt": row["prompt"], "completion": completion}) + "\n")

    def words(text, add_special_tokens=False):
        return {"input_ids": text.split()}

    got = classify(tmp_path / "samples.jsonl", tmp_path / "report.json", TASK, "test", words)
    assert got["base"]["counts"] == {
        "right": 0,
        "truncated": 1,
        "no_answer": 1,
        "wrong_arithmetic": 0,
        "wrong_other": 0,
    }
    assert got["rl"]["counts"]["right"] == 1 and got["rl"]["counts"]["wrong_other"] == 1
    assert got["base"]["format_share_of_failures"] == 1.0 and got["rl"]["format_share_of_failures"] == 0.0


def test_the_script_classifies_the_searchs_test_and_samples_only_the_harder_split(tmp_path, monkeypatch):
    """scripts/real_result.py after `search.py --test`: the test's samples are read, not drawn again; the harder split
    (3 operands) is sampled with the same two models, named as the test report names them."""
    import json

    from grpo_ext.errors import UserError
    from scripts.real_result import main

    search, pick = tmp_path / "search", str(tmp_path / "search" / "runs" / "lr=1" / "model")
    (search / "test").mkdir(parents=True)
    (tmp_path / "real.yaml").write_text("task_kwargs: {digits: 2}\n")
    record = {"config": str(tmp_path / "real.yaml"), "base": "embedded", "pick": {"slug": "lr=1"}}
    (search / "search.json").write_text(json.dumps(record))
    with pytest.raises(UserError, match="run scripts/search.py with --test first"):
        main(["--search", str(search)])

    def write_folder(folder, kwargs, models, completions):
        rows = WordArithmeticTask(**kwargs).load("test", 2)
        report = {"models": [{"model": m, "params": {"max_new_tokens": 64}, "n_problems": 2} for m in models]}
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "report.json").write_text(json.dumps(report))
        lines = [{"model": m, "prompt": r["prompt"], "completion": completions(r)} for m in models for r in rows]
        (folder / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))

    write_folder(search / "test", {"digits": 2}, ["embedded", pick], lambda row: f"#### {row['answer']}")
    (search / "search.json").write_text(json.dumps({**record, "test": {"base": 1.0, "pick": 1.0}}))
    calls = []

    def harness(argv):
        calls.append(argv)
        kwargs = json.loads(argv[argv.index("--task-kwargs") + 1])
        write_folder(Path(argv[argv.index("--out") + 1]), kwargs, argv[1:4:2], lambda row: "no idea")

    monkeypatch.setattr("evals.passk_majk.main", harness)
    out = main(["--search", str(search)])
    assert len(calls) == 1 and calls[0][1:4:2] == ["embedded", pick]
    harder = json.loads(calls[0][calls[0].index("--task-kwargs") + 1])
    assert harder == {"digits": 2, "min_operands": 3, "max_operands": 3}
    assert out["labels"] == {"embedded": "base", pick: "pick (lr=1)"}
    assert out["test"][pick]["counts"]["right"] == 2 and out["harder"][pick]["counts"]["no_answer"] == 2
    assert (search / "failures.md").is_file()
