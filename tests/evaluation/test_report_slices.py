"""What a report shows beyond the whole-set means (issue 36): per-slice metrics with intervals and paired differences,
the strict answer form apart from correctness, what moved problem by problem, the anatomy wired in, the samples
excerpt (the same file from the cache as fresh), and the --by / --stop flags. Hand-worked numbers throughout."""

import json

import numpy as np
import pytest

from grpo_ext.errors import UserError
from grpo_ext.evaluation import failures
from grpo_ext.evaluation.analysis import BootstrapSettings
from grpo_ext.evaluation.backends import Backend
from grpo_ext.evaluation.cli import HarnessArgumentParser, add_harness_arguments, harness_settings
from grpo_ext.evaluation.excerpt import EXCERPT_NAME, question_text
from grpo_ext.evaluation.harness import evaluate_model
from grpo_ext.evaluation.metrics import pass_at_k
from grpo_ext.evaluation.moved import moved_problems
from grpo_ext.evaluation.report import read_report, write_reports
from grpo_ext.evaluation.scoring import score_problem, summarize
from grpo_ext.evaluation.slices import check_by, comparison_slices, model_slices, with_attributes
from grpo_ext.sampler.sampling import SamplingParams, derive_seed
from grpo_ext.tasks import get_task
from grpo_ext.tasks.arithmetic import Problem
from tests.harness_results import harness_result

TASK = get_task("arithmetic")
FAST = BootstrapSettings(n_resamples=10_000, seed=0)
N = 4


def _result(name: str, prompts: list[str], n_correct: list[int], n: int = N, ks=(1, 2, 4)) -> dict:
    """A harness-shaped result of the arithmetic task: problem i has n_correct[i] right samples, the rest 999."""
    problems = [{"prompt": p, "answer": str(Problem.from_prompt(p).answer)} for p in prompts]
    completions = [[f"#{p['answer']}"] * c + ["#999"] * (n - c) for p, c in zip(problems, n_correct, strict=True)]
    return harness_result(name, TASK, problems, completions, ks, taus=[0.5])


# six problems, two slices by operation: 0-2 add, 3-5 subtract
PROMPTS = ["1+2=", "3+4=", "5+1=", "9-2=", "8-3=", "7-5="]
A_CORRECT = [4, 2, 0, 0, 1, 3]
B_CORRECT = [4, 4, 0, 1, 2, 4]  # + moves by (0, +2, 0) samples of 4, - by (+1, +1, +1)


def test_a_slices_pass_at_k_and_paired_interval_by_hand():
    a, b = _result("a", PROMPTS, A_CORRECT), _result("b", PROMPTS, B_CORRECT)
    plus, minus = model_slices(a, ["operation"], FAST, min_problems=2)["operation"]
    assert (plus["value"], plus["n_problems"], minus["value"], minus["n_problems"]) == ("+", 3, "-", 3)
    # "+": right 4, 2, 0 of 4. pass@1 = (1 + 1/2 + 0) / 3; pass@2 = (1 + (1 - C(2,2)/C(4,2)) + 0) / 3 = 11/18
    assert plus["pass@k"]["1"] == pytest.approx(0.5) and plus["pass@k"]["2"] == pytest.approx(11 / 18)
    assert minus["pass@k"]["4"] == pytest.approx(2 / 3)  # 0 of 4 right on one problem: pass@4 = 0 there
    assert plus["pass@k"]["2"] == pytest.approx(np.mean([pass_at_k(4, c, 2) for c in A_CORRECT[:3]]))
    low, high = plus["intervals"]["pass@k"]["1"]
    assert low <= 0.5 <= high and low >= 0.0 and high <= 1.0

    (c_plus, c_minus) = comparison_slices(a, b, ["operation"], FAST, min_problems=2)["operation"]
    # "-": every problem gains one sample of 4, so every resample's mean difference is 0.25: the interval is the point
    d = c_minus["difference"]["mean_accuracy"]
    assert (d["difference"], d["low"], d["high"]) == pytest.approx((0.25, 0.25, 0.25))
    # "+": differences 0, +0.5, 0. A resample draws the +0.5 problem 0..3 times of 3: P(none) = (2/3)^3 = 0.30 and
    # P(all three) = 1/27 = 0.037, both above 2.5%, so the 95% interval is exactly [0, 0.5]
    d = c_plus["difference"]["mean_accuracy"]
    assert (d["difference"], d["low"], d["high"]) == pytest.approx((1 / 6, 0.0, 0.5))
    assert (c_plus["a"]["mean_accuracy"], c_plus["b"]["mean_accuracy"]) == pytest.approx((0.5, 2 / 3))


def test_the_report_has_a_table_per_slice_bold_beyond_noise_and_says_when_a_slice_is_too_small(tmp_path):
    a, b = _result("a", PROMPTS, A_CORRECT), _result("b", PROMPTS, B_CORRECT)
    write_reports([a, b], tmp_path, bootstrap=FAST, by=["operation", "operands"], min_slice_problems=3)
    payload = json.loads((tmp_path / "report.json").read_text())
    assert payload["slices"] == {"by": ["operation", "operands"], "min_problems": 3}
    (paired,) = payload["paired_slices"]
    assert (paired["a"], paired["b"]) == ("a", "b")
    minus = paired["slices"]["operation"][1]
    assert minus["difference"]["mean_accuracy"]["low"] == pytest.approx(0.25)
    # the JSON holds every metric per slice, as the model's own keys (the same numbers as model_slices)
    model_minus = payload["models"][0]["slices"]["operation"][1]
    assert model_minus == json.loads(json.dumps(model_slices(a, ["operation"], FAST, 3)["operation"][1]))
    assert {"pass@k", "maj@k", "pass^k", "cover@tau", "strict_accuracy", "strict_share"} <= set(model_minus)
    md = (tmp_path / "report.md").read_text()
    assert "### By operation" in md and "### B against A by operation: b (B) vs a (A)" in md
    assert "| - | 3 | 0.333 | 0.583 | **+0.250 [+0.250, +0.250]** |" in md  # bold: the interval excludes 0
    assert "| + | 3 | 0.500 | 0.667 | +0.167 [+0.000, +0.500] |" in md  # not bold: it holds 0
    # a slice below the minimum: the point alone, and the report says why
    small = model_slices(a, ["operation"], FAST, min_problems=10)["operation"][0]
    assert small["interval"] is False and small["intervals"] is None
    write_reports([a, b], tmp_path, bootstrap=FAST, by=["operation"])
    md = (tmp_path / "report.md").read_text()
    assert "| - | 3 (too few for an interval) | 0.333 | 0.583 | +0.250 |" in md


def test_a_report_written_before_slices_reads_and_renders_without_them(tmp_path):
    old = _result("old", PROMPTS, A_CORRECT)
    for record in old["per_problem"]:
        for key in ("attributes", "n_strict", "n_correct_strict", "top_answers"):
            del record[key]
    for key in ("strict_accuracy", "strict_share"):
        del old[key]
    write_reports([old, _result("new", PROMPTS, B_CORRECT)], tmp_path, bootstrap=FAST)
    payload = json.loads((tmp_path / "report.json").read_text())
    assert "slices" not in payload["models"][0] and payload["paired_slices"][0]["slices"] == {}
    assert read_report(tmp_path, "old")["mean_accuracy"] == pytest.approx(np.mean(A_CORRECT) / 4)
    # a committed report can be sliced without sampling: the attributes are read from each record's prompt
    sliced = with_attributes(old, TASK)
    assert [p["attributes"]["operation"] for p in sliced["per_problem"]] == ["+"] * 3 + ["-"] * 3
    assert "attributes" not in old["per_problem"][0]  # the caller's result is left as it was
    # the moved list still names the top answer the old record kept
    assert payload["moved"][0]["up"][0]["a"]["top_answers"] == [["7", None]]  # problem 1: 7 x2 (first seen), 999 x2


def test_a_result_without_its_params_key_gets_one_with_its_stop_strings(tmp_path):
    params = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 8, "seed": 0}
    stopped = SamplingParams(n=N, **params, stop=("Question:",))
    result = {**_result("m", PROMPTS, A_CORRECT), "params": stopped.to_dict()}  # written without a params_key
    (tmp_path / "stopped.json").write_text(json.dumps(result))
    assert read_report(tmp_path / "stopped.json")["params_key"] == stopped.key() != SamplingParams(**params).key()
    # a result written before stop strings: no "stop" in its params, the key without them (as it was drawn)
    (tmp_path / "older.json").write_text(json.dumps({**result, "params": params}))
    assert read_report(tmp_path / "older.json")["params_key"] == SamplingParams(**params).key()


# ---- the strict form ----------------------------------------------------------------------------------------


def test_strict_share_and_accuracy_on_hand_written_completions(tmp_path):
    task = get_task("word_arithmetic")
    problem = {"problem_id": "p", "prompt": "Leo has 34 apples. Then Leo sells 22 apples.", "answer": "12"}
    completions = [
        "34 - 22 = 12\n#### 12",  # right, strict
        "Leo has 34 - 22 = 12 apples left.",  # right, not strict: the lenient last number
        "34 + 22 = 56\n#### 56",  # wrong, strict
        "I do not know",  # no number
    ]
    record = score_problem(task, problem, completions, [1])
    assert (record["n_correct"], record["n_strict"], record["n_correct_strict"]) == (2, 2, 1)
    assert record["top_answers"] == [["12", 2], ["56", 1]]
    means = summarize([record], 4, [1], [0.5])
    result = {**_result("m", ["1+2="], [1], ks=(1,)), **means, "per_problem": [record], "strict_form": task.strict_form}
    assert (result["mean_accuracy"], result["strict_accuracy"], result["strict_share"]) == (0.5, 0.25, 0.5)
    write_reports([result], tmp_path, bootstrap=FAST, by=())
    md = (tmp_path / "report.md").read_text()
    assert "strict form (`#### n or \\boxed{n}`): 0.500 [0.500, 0.500] of samples" in md
    assert "strict pass@1 0.250 [0.250, 0.250] beside pass@1 0.500 (right but unformatted: 0.250)" in md


# ---- what moved -----------------------------------------------------------------------------------------------


def test_moved_lists_the_largest_rises_and_falls_in_order_with_ties_in_problem_order():
    prompts = [f"{i}+1=" for i in range(7)]
    a = _result("a", prompts, [0, 4, 2, 0, 3, 1, 2])
    b = _result("b", prompts, [4, 0, 3, 2, 3, 0, 4])
    #          change (of 4):  +4 -4 +1 +2  0 -1 +2
    moved = moved_problems(a, b, top=2)
    assert [e["problem_id"] for e in moved["up"]] == ["0", "3"]  # +4, then +2 (problem 3 before problem 6)
    assert [e["problem_id"] for e in moved["down"]] == ["1", "5"]  # -4, then -1; problem 4 did not move
    first = moved["up"][0]
    assert (first["change"], first["a"]["accuracy"], first["b"]["accuracy"]) == (1.0, 0.0, 1.0)
    assert first["a"]["top_answers"] == [["999", 4]] and first["b"]["top_answers"] == [["1", 4]]
    assert first["attributes"]["operation"] == "+" and first["answer"] == "1"
    every = moved_problems(a, b)
    assert [e["problem_id"] for e in every["up"]] == ["0", "3", "6", "2"]


def test_the_report_puts_slices_before_the_per_k_tables_and_what_moved_shows_the_question(tmp_path):
    """A skeptical reader's order: summary, B against A, slices, then what moved (with each problem's question: the
    issue's "Leo has 34 apples. Then Leo sells 22 apples", top answer 56), the long per-model tables last."""
    task = get_task("word_arithmetic")
    fewshot = "Question: Ann has 5 pens. Then Ann buys 2 pens. How many pens does Ann have now?\nAnswer: 7\n\n"
    question = "Question: Leo has 34 apples. Then Leo sells 22 apples. How many apples does Leo have now?"
    problems = [
        {"prompt": [{"role": "user", "content": f"{fewshot}{question}\nAnswer:"}], "answer": "12"},
        {"prompt": "Question: Mia has 3 cups. Then Mia buys 4 cups. How many cups does Mia have now?", "answer": "7"},
    ]
    a = harness_result("base", task, problems, [["34 - 22 = 12\n#### 12"] * 2, ["3 + 4 = 7"] * 2], [1, 2])
    b = harness_result("rl", task, problems, [["34 + 22 = 56"] * 2, ["3 + 4 = 7"] * 2], [1, 2])
    write_reports([a, b], tmp_path, bootstrap=FAST)
    md = (tmp_path / "report.md").read_text()
    order = ["| model | pass@1 |", "## B against A: rl (B) vs base (A)", "## Slices", "### B against A by operation"]
    order += ["## Failure anatomy (content first)", "## What moved most", "## base\n", "## rl\n"]
    assert [md.index(heading) for heading in order] == sorted(md.index(heading) for heading in order)
    (down,) = json.loads((tmp_path / "report.json").read_text())["moved"][0]["down"]
    assert down["question"] == question and down["b"]["top_answers"] == [["56", 2]]
    assert f"  - ` {question} `" in md
    assert "  - B: 56 ×2" in md
    # the question is shortened to its last "Question: ...", cut where it is long
    assert question_text("Q: a\nQuestion: " + "x" * 300, 40) == "Question: " + "x" * 29 + "…"
    assert question_text("7+8=", 40) == "7+8=" and question_text("y" * 50, 10) == "…" + "y" * 9


# ---- through the harness: anatomy, hit_budget, the excerpt from the cache and fresh ------------------------


class _Tokenizer:
    """One token per character: a sample hits a budget of 8 tokens when it is 8 characters long."""

    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [list(text) for text in texts]}


class _Backend(Backend):
    """Sample j of a prompt is a function of (prompt, seed, j): right, wrong or long (8 characters)."""

    backend_name = "fake"

    def __init__(self):
        self.name, self.fingerprint, self.tokenizer, self.drawn = "fake", "f00", _Tokenizer(), 0

    def generate(self, prompts, params, *, progress=False):
        self.drawn += len(prompts) * params.n
        out = []
        for prompt in prompts:
            right = Problem.from_prompt(prompt).answer
            kinds = [derive_seed(prompt, params.seed, j) % 3 for j in range(params.n)]
            out.append([[f"#{right}", f"#{right + 1}", "1+1=2;1+"][k] for k in kinds])
        return out


def test_the_excerpt_is_the_same_file_from_the_cache_as_fresh_and_the_anatomy_is_summed(tmp_path):
    problems = [{"prompt": p, "answer": str(Problem.from_prompt(p).answer)} for p in PROMPTS]
    params = SamplingParams(n=N, temperature=1.0, max_new_tokens=8, batch_size=2)
    cache = tmp_path / "samples.jsonl"
    fresh_backend, cached_backend = _Backend(), _Backend()
    fresh = evaluate_model(fresh_backend, TASK, params, [1, 4], cache, problems=problems, progress=False)
    cached = evaluate_model(cached_backend, TASK, params, [1, 4], cache, problems=problems, progress=False)
    assert fresh_backend.drawn == 24 and cached_backend.drawn == 0 and cached["samples"]["from_cache"] == 24
    write_reports([fresh], tmp_path / "fresh", bootstrap=FAST)
    write_reports([cached], tmp_path / "cached", bootstrap=FAST)
    text = (tmp_path / "fresh" / EXCERPT_NAME).read_text()
    assert text == (tmp_path / "cached" / EXCERPT_NAME).read_text()
    rows = [json.loads(line) for line in text.splitlines()]
    assert [(r["problem_id"], r["sample_index"]) for r in rows] == [(str(i), j) for i in range(6) for j in (0, 1)]
    for row in rows:  # "#n" wrong: every step true, a wrong plan; "1+1=2;1+" at the budget: no "#n", unfinished
        kind = "right" if row["correct"] else "unfinished" if row["completion"] == "1+1=2;1+" else "wrong_plan"
        assert row["kind"] == kind and row["hit_budget"] == (len(row["completion"]) >= 8)
        assert row["attributes"]["operation"] in "+-" and row["question"] == PROMPTS[int(row["problem_id"])]
    # the anatomy: per problem, summed per model and per slice; the budget was counted with the tokenizer
    counts = [p["anatomy"] for p in fresh["per_problem"]]
    assert fresh["anatomy"] == failures.add_counts(counts)
    assert {k: v for k, v in fresh["anatomy"].items() if k != "strict"} == {
        k: sum(c[k] for c in counts) for k in failures.kinds_of(TASK)
    }
    assert fresh["anatomy"]["wrong_plan"] > 0 and fresh["anatomy"]["unfinished"] > 0
    assert fresh["anatomy"]["right"] == sum(p["n_correct"] for p in fresh["per_problem"])
    assert fresh["anatomy_budget"] == "tokenizer"
    assert "excerpt" not in json.loads((tmp_path / "fresh" / "report.json").read_text())["models"][0]
    slices = json.loads((tmp_path / "fresh" / "report.json").read_text())["models"][0]["slices"]["operation"]
    assert sum(s["anatomy"]["unfinished"] for s in slices) == fresh["anatomy"]["unfinished"]
    md = (tmp_path / "fresh" / "report.md").read_text()
    assert "## Failure anatomy (content first)" in md and "| fake: operation + | 12 |" in md


# ---- the flags ----------------------------------------------------------------------------------------------


def _settings(*argv) -> object:
    parser = add_harness_arguments(HarnessArgumentParser(prog="t"))
    return harness_settings(parser.parse_args(list(argv)))


def test_by_and_stop_default_to_the_tasks_and_none_switches_them_off():
    settings = _settings("--task", "word_arithmetic")
    assert settings.by == ("operation", "operands", "carry_borrow") and settings.params.stop == ("Question:",)
    settings = _settings("--task", "word_arithmetic", "--by", "none", "--stop", "none")
    assert settings.by == () and settings.params.stop == ()
    settings = _settings("--by", "operands", "--stop", "\n\n", "--stop", "Q:")
    assert settings.by == ("operands",) and settings.params.stop == ("\n\n", "Q:")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--by", "colour"], "--by colour: not an attribute of this task's problems (known: operation, operands, "),
        (["--stop", "none", "--stop", "Q:"], "--stop none means no stop at all"),
        (["--by", ""], "--by needs a non-empty value"),
    ],
)
def test_bad_by_and_stop_are_one_line_errors_naming_the_flag(argv, message):
    with pytest.raises(UserError) as err:
        _settings(*argv)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_task_without_attributes_says_it_has_none():
    with pytest.raises(UserError, match="--by level: .*known: none: this task declares no slice attributes"):
        check_by(["level"], ())
