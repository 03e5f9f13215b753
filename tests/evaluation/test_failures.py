"""The failure anatomy reads content first: right / wrong arithmetic / wrong plan / no number / unfinished, with the
strict answer form as a column of its own; and scripts/real_result.py's use of it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grpo_ext.evaluation.failures import (
    add_counts,
    anatomy_counts,
    anatomy_markdown,
    failure_kind,
    kinds_of,
    summarize_anatomy,
)
from grpo_ext.tasks.arithmetic import ArithmeticTask
from grpo_ext.tasks.gsm8k import GSM8KTask
from grpo_ext.tasks.word_arithmetic import WordArithmeticTask, problem_from_question

WORD = WordArithmeticTask()
# problem 483 of the issue, with an addition as its worked example (as the real run's prompts had): the verifier must
# read the question, not the example's numbers
EXAMPLE = (
    "Zoe has 82 coins. Then Zoe buys 27 more coins. How many coins does Zoe have now?",
    "82 + 27 = 109\n#### 109",
)
SELLS = [
    {
        "role": "user",
        "content": WORD.build_prompt(
            "Leo has 34 apples. Then Leo sells 22 apples. How many apples does Leo have now?", [EXAMPLE]
        ),
    }
]
THREE = WORD.build_prompt("Mia has 43 apples. Then Mia buys 17 more apples. Then Mia gives away 18 apples. How many "
                          "apples does Mia have now?")  # fmt: skip


@pytest.mark.parametrize(
    ("prompt", "completion", "answer", "hit_budget", "kind", "strict"),
    [
        (SELLS, "34 - 22 = 12\n#### 12", "12", False, "right", True),
        (SELLS, "34 - 22 = 12", "12", False, "right", False),  # right, unformatted: the lenient last number
        (SELLS, "34 - 22 = 12\n#### 12\n\nQuestion: Ben has 5", "12", True, "right", True),  # right, then rambling
        # the shortcut: every step true, the answer is the sum, no ####
        (SELLS, "34 + 22 = 56", "12", False, "wrong_plan", False),
        (SELLS, "34 + 22 = 56\n#### 56", "12", False, "wrong_plan", True),  # the #### line is the answer, not a step
        (SELLS, "#### 56", "12", False, "wrong_plan", True),  # a bare wrong answer: no false step
        (THREE, "43 + 17 = 60\n#### 60", "42", False, "wrong_plan", True),  # an operation left out
        (THREE, "43 + 17 = 60\n60 + 18 = 78\n#### 78", "42", True, "wrong_plan", True),  # answered, at the budget
        # a false equation anywhere, marked answer or not
        (SELLS, "34 - 22 = 13\n#### 13", "12", False, "wrong_arithmetic", True),
        (
            SELLS,
            "Leo had 34 apples and sold 22 of them, so we subtract.\n34 - 22 = 11\nSo Leo has 11 apples left, "
            "which is fewer than 34.",
            "12",
            False,
            "wrong_arithmetic",
            False,
        ),
        (THREE, "43 + 17 = 61\n61 - 18 = 43\n#### 43", "42", False, "wrong_arithmetic", True),
        (SELLS, "34 - 20 = 14\n#### 14", "12", False, "wrong_arithmetic", True),  # a number not in the problem
        # no number: stopped (no_number) or cut by the budget (unfinished)
        (SELLS, "Let me think about the apples.", "12", False, "no_number", False),
        (SELLS, "Leo has some apples and then he sells some of them so", "12", True, "unfinished", False),
        # cut mid-solution: its last number (22) is not an answer it gave; stopped there, it is a (wrong) answer
        (SELLS, "34 - 22 =", "12", True, "unfinished", False),
        (SELLS, "34 - 22 =", "12", False, "wrong_plan", False),
        (SELLS, "34 - 22 = 10\n10 -", "12", True, "wrong_arithmetic", False),  # a false step outranks the budget
    ],
)
def test_word_arithmetic_samples_by_hand(prompt, completion, answer, hit_budget, kind, strict):
    assert failure_kind(WORD, prompt, completion, answer, hit_budget) == kind
    record = anatomy_counts(WORD, prompt, [completion], answer, [hit_budget])
    assert record[kind] == 1 and sum(v for k, v in record.items() if k != "strict") == 1
    assert record["strict"][kind] == int(strict)


ARITH = ArithmeticTask()


@pytest.mark.parametrize(
    ("completion", "hit_budget", "kind"),
    [
        ("37+45=82;82-18=64;#64", False, "right"),
        ("37+45=83;83-18=65;#65", False, "wrong_arithmetic"),
        ("37+45=82;82-18=65;#65", False, "wrong_arithmetic"),
        ("37+45=82;#82", False, "wrong_plan"),  # an operation left out: the step is true, "#82" is the answer line
        ("37+45=82;82-18=64;#65", False, "wrong_plan"),  # the answer miscopied after right steps
        # this verifier also checks that a step is the problem's next operation: a swapped operator is a false step
        ("37+45=82;82+18=100;#100", False, "wrong_arithmetic"),
        ("37+45=82;82-18=64", False, "no_number"),  # no "#" answer line: nothing extracted
        ("37+45=82;82-1", True, "unfinished"),
    ],
)
def test_embedded_arithmetic_samples_by_hand(completion, hit_budget, kind):
    assert failure_kind(ARITH, "37+45-18=", completion, "64", hit_budget) == kind
    # its strict form is its only form: in it exactly when there is a "#" answer
    assert anatomy_counts(ARITH, "37+45-18=", [completion], "64", [hit_budget])["strict"][kind] == ("#" in completion)


def test_counts_of_one_problem_with_the_strict_column():
    completions = ["34 - 22 = 12\n#### 12", "34 - 22 = 12", "34 + 22 = 56", "34 + 22 = 56", "34 - 22 = 13", "hm", "so"]
    hit = [False, False, False, False, False, False, True]
    record = anatomy_counts(WORD, SELLS, completions, "12", hit)
    assert record == {
        **{"right": 2, "wrong_arithmetic": 1, "wrong_plan": 2, "no_number": 1, "unfinished": 1},
        "strict": {"right": 1, "wrong_arithmetic": 0, "wrong_plan": 0, "no_number": 0, "unfinished": 0},
    }
    # the budget unknown (a backend without a tokenizer): nothing is unfinished, the cut-off sample has no number
    unknown = anatomy_counts(WORD, SELLS, completions, "12", None)
    assert unknown["no_number"] == 2 and unknown["unfinished"] == 0
    # what the harness already knows is taken, not recomputed: a caller's verdict decides "right"
    told = anatomy_counts(WORD, SELLS, completions[:1], "12", [False], correct=[False], extracted=["12"])
    assert told["wrong_plan"] == 1
    with pytest.raises(ValueError, match=r"one entry per completion \(7\)"):
        anatomy_counts(WORD, SELLS, completions, "12", [False])


def test_a_task_without_a_step_verifier_keeps_wrong_answers_unsplit():
    gsm8k = GSM8KTask()
    assert not gsm8k.has_step_verifier and kinds_of(gsm8k) == ("right", "wrong", "no_number", "unfinished")
    assert kinds_of(WORD) == ("right", "wrong_arithmetic", "wrong_plan", "no_number", "unfinished")
    prompt = "Question: Leo has 34 apples. Then Leo sells 22 apples. How many apples does Leo have now?\nAnswer:"
    # a false equation cannot be seen without a verifier: wrong, like the plain shortcut; cut off by the budget with
    # no strict answer, unfinished as with a verifier
    record = anatomy_counts(gsm8k, prompt, ["34 - 22 = 13\n#### 13", "34 + 22 = 56", "", "34 -"], "12", [0, 0, 0, 1])
    assert record == {
        "right": 0,
        "wrong": 2,
        "no_number": 1,
        "unfinished": 1,
        "strict": {"right": 0, "wrong": 1, "no_number": 0, "unfinished": 0},
    }


def test_summary_and_table_over_problems():
    a = {"right": 2, "wrong_arithmetic": 1, "wrong_plan": 1, "no_number": 0, "unfinished": 0,
         "strict": {"right": 1, "wrong_arithmetic": 1, "wrong_plan": 0, "no_number": 0, "unfinished": 0}}  # fmt: skip
    b = {"right": 0, "wrong_arithmetic": 0, "wrong_plan": 3, "no_number": 0, "unfinished": 1,
         "strict": {"right": 0, "wrong_arithmetic": 0, "wrong_plan": 2, "no_number": 0, "unfinished": 0}}  # fmt: skip
    assert add_counts([a, b]) == {
        "right": 2,
        "wrong_arithmetic": 1,
        "wrong_plan": 4,
        "no_number": 0,
        "unfinished": 1,
        "strict": {"right": 1, "wrong_arithmetic": 1, "wrong_plan": 2, "no_number": 0, "unfinished": 0},
    }
    s = summarize_anatomy([a, b])
    assert s["samples"] == 8 and s["shares"]["wrong_plan"] == 0.5 and s["strict_counts"]["wrong_plan"] == 2
    assert s["strict_share"] == 4 / 8 and s["right_strict_share"] == 1 / 8
    table = anatomy_markdown({"rl": s})
    assert table[0] == (
        "| model | samples | right | wrong arithmetic | wrong plan | no number | unfinished | strict form "
        "| right, strict form |"
    )
    assert table[-1] == "| rl | 8 | 0.250 | 0.125 | 0.500 | 0.000 | 0.125 | 0.500 | 0.125 |"
    # a row of a verifier-less task brings its "wrong" column; kinds a row lacks read 0
    plain = summarize_anatomy([{"right": 1, "wrong": 1, "strict": {"right": 1, "wrong": 0}}])
    assert anatomy_markdown({"rl": s, "gsm8k": plain})[-1] == (
        "| gsm8k | 2 | 0.500 | 0.000 | 0.000 | 0.500 | 0.000 | 0.000 | 0.500 | 0.500 |"
    )


# ---- scripts/real_result.py --------------------------------------------------------------------------------------


def write_harness_folder(folder: Path, task, models, completions, n_problems=2, max_new_tokens=64, anatomy=None):
    """A harness output folder: report.json (optionally with per-problem anatomy records) and samples.jsonl."""
    rows = task.load("test", n_problems)
    per_problem = [{"problem_id": str(i), "prompt": r["prompt"], "answer": r["answer"]} for i, r in enumerate(rows)]
    if anatomy is not None:
        per_problem = [{**p, **anatomy(i)} for i, p in enumerate(per_problem)]
    report = {
        "models": [
            {
                "model": m,
                "params": {"max_new_tokens": max_new_tokens},
                "n_problems": n_problems,
                "per_problem": per_problem,
            }
            for m in models
        ]
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "report.json").write_text(json.dumps(report))
    lines = [
        {"model": m, "prompt": r["prompt"], "completion": c} for m in models for r in rows for c in completions(m, r)
    ]
    (folder / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return rows


def words(texts, add_special_tokens=False):
    """A tokenizer of words, batched as a transformers tokenizer is."""
    return {"input_ids": [text.split() for text in texts]}


def test_the_script_classifies_a_samples_file_by_model_and_slice(tmp_path):
    """Without anatomy records in report.json, each sample is classified (the budget read by re-tokenising), per
    model and per slice of the task's attributes."""
    from scripts.real_result import classify

    task = WordArithmeticTask(balance_operations=True)  # problem 0 an addition, problem 1 a subtraction
    rows = task.load("test", 2)
    assert [task.problem_attributes(r)["operation"] for r in rows] == ["+", "-"]

    def completions(model, row):
        if model == "base":
            return ["a b c d e", "no idea here"]  # 5 words >= 4: unfinished; 3 words: stopped, no number
        x, y = problem_from_question(row["question"]).operands
        return [f"#### {row['answer']}", f"{x}+{y}={x + y}"]  # right in strict form; the sum, unformatted

    write_harness_folder(tmp_path, task, ["base", "rl"], completions, max_new_tokens=4)
    got = classify(tmp_path / "samples.jsonl", tmp_path / "report.json", task, "test", words)
    assert got["base"]["all"]["counts"] == {
        "right": 0,
        "wrong_arithmetic": 0,
        "wrong_plan": 0,
        "no_number": 2,
        "unfinished": 2,
    }
    rl = got["rl"]
    # the sum is right for the addition and a wrong plan for the subtraction
    assert rl["all"]["counts"]["right"] == 3 and rl["all"]["counts"]["wrong_plan"] == 1
    assert rl["all"]["strict_share"] == 0.5 and rl["all"]["right_strict_share"] == 0.5
    assert set(rl["by"]) == {"operation", "carry_borrow"}  # "operands" is 2 everywhere: no slice
    minus = rl["by"]["operation"]["-"]
    assert minus["samples"] == 2 and minus["counts"]["right"] == 1 and minus["counts"]["wrong_plan"] == 1


def test_the_script_prefers_the_reports_anatomy_records(tmp_path):
    """With ``anatomy`` (and ``attributes``) in each per-problem record, those are read, not the samples."""
    from scripts.real_result import classify

    task = WordArithmeticTask()

    def record(i):
        kinds = {"right": i, "wrong_arithmetic": 0, "wrong_plan": 3 - i, "no_number": 0, "unfinished": 0}
        return {"anatomy": {**kinds, "strict": dict(kinds, wrong_plan=0)}, "attributes": {"operation": "+-"[i]}}

    write_harness_folder(tmp_path, task, ["rl"], lambda m, r: ["no idea"], anatomy=record)
    got = classify(tmp_path / "samples.jsonl", tmp_path / "report.json", task, "test", words)["rl"]
    assert got["all"]["counts"]["right"] == 1 and got["all"]["counts"]["wrong_plan"] == 5  # no "no_number" sample
    assert got["by"]["operation"]["-"]["counts"]["right"] == 1 and got["all"]["strict_share"] == 1 / 6


def test_the_script_classifies_the_searchs_test_and_samples_only_the_harder_split(tmp_path, monkeypatch):
    """scripts/real_result.py after `search.py --test`: the test's samples are read, not drawn again; the harder split
    (3 operands) is sampled with the same two models, named as the test report names them."""
    from grpo_ext.errors import UserError
    from scripts.real_result import main

    search, pick = tmp_path / "search", str(tmp_path / "search" / "runs" / "lr=1" / "model")
    (search / "test").mkdir(parents=True)
    (tmp_path / "real.yaml").write_text("task_kwargs: {digits: 2}\n")
    record = {"config": str(tmp_path / "real.yaml"), "base": "embedded", "pick": {"slug": "lr=1"}}
    (search / "search.json").write_text(json.dumps(record))
    with pytest.raises(UserError, match="run scripts/search.py with --test first"):
        main(["--search", str(search)])

    six, answered = {"n_problems": 6}, lambda m, r: [f"#### {r['answer']}"]
    write_harness_folder(search / "test", WordArithmeticTask(digits=2), ["embedded", pick], answered, **six)
    (search / "search.json").write_text(json.dumps({**record, "test": {"base": 1.0, "pick": 1.0}}))
    calls = []

    def harness(argv):
        calls.append(argv)
        kwargs = json.loads(argv[argv.index("--task-kwargs") + 1])
        folder = Path(argv[argv.index("--out") + 1])
        write_harness_folder(folder, WordArithmeticTask(**kwargs), argv[1:4:2], lambda m, r: ["no idea"], **six)

    monkeypatch.setattr("grpo_ext.evaluation.passk_majk.main", harness)
    out = main(["--search", str(search)])
    assert len(calls) == 1 and calls[0][1:4:2] == ["embedded", pick]
    harder = json.loads(calls[0][calls[0].index("--task-kwargs") + 1])
    assert harder == {"digits": 2, "min_operands": 3, "max_operands": 3}
    assert out["labels"] == {"embedded": "base", pick: "pick (lr=1)"}
    assert out["test"][pick]["all"]["counts"]["right"] == 6 and out["harder"][pick]["all"]["counts"]["no_number"] == 6
    text = (search / "failures.md").read_text()
    assert "| pick (lr=1) | 6 | 1.000 | 0.000 | 0.000 | 0.000 | 0.000 | 1.000 | 1.000 |" in text
    plus = out["test"][pick]["by"]["operation"]["+"]["samples"]
    assert f"| pick (lr=1): + | {plus} | 1.000 |" in text and 0 < plus < 6
