"""Real-dataset tasks (GSM8K, MATH, generic JSONL) on fixtures in the real formats: loading, answer extraction,
math-verify equivalence, bad input, and that answer checking never executes model text."""

from __future__ import annotations

import json
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from datasets import Dataset

from grpo_ext.tasks import TASKS, get_task
from grpo_ext.tasks import data as data_module
from grpo_ext.tasks.answers import last_boxed, normalize_number
from grpo_ext.tasks.gsm8k import GSM8KTask, extract_gsm8k_answer
from grpo_ext.tasks.jsonl import JSONLTask
from grpo_ext.tasks.math import MathTask

FIXTURES = Path(__file__).parents[1] / "fixtures"
GSM8K_FILE = FIXTURES / "gsm8k_sample.jsonl"
MATH_FILE = FIXTURES / "math_sample.jsonl"
GENERIC_FILE = FIXTURES / "generic.jsonl"

GSM8K_ANSWERS = ["405", "108", "292", "555000", "16", "5", "-7", "44"]
MATH_ANSWERS = ["4", r"\frac{1}{6}", r"3\sqrt{5}", "-7", r"\frac{\sqrt{3}}{2}", r"(4, \infty)", "12", r"\dfrac{7}{12}"]


@pytest.fixture(scope="module")
def gsm8k():
    return GSM8KTask(data_files=str(GSM8K_FILE))


@pytest.fixture(scope="module")
def math_task():
    return MathTask(data_files=str(MATH_FILE))


# ---- registry ---------------------------------------------------------------------------------------------------


def test_registered_and_every_task_returns_prompt_and_string_answer_columns():
    assert {"gsm8k", "math", "jsonl", "arithmetic"} <= set(TASKS)
    for name, kwargs in [
        ("gsm8k", {"data_files": str(GSM8K_FILE)}),
        ("math", {"data_files": str(MATH_FILE)}),
        ("jsonl", {"path": str(GENERIC_FILE)}),
    ]:
        data = get_task(name, **kwargs).load("test")
        assert isinstance(data, Dataset)
        assert {"prompt", "answer"} <= set(data.column_names)
        assert all(isinstance(a, str) and a for a in data["answer"])
        assert all(isinstance(p, str) and p for p in data["prompt"])
    with pytest.raises(ValueError, match="jsonl"):
        get_task("jsonl")  # `path` is required: named, not a constructor traceback


def test_step_verifier_is_part_of_the_task_contract(gsm8k, math_task):
    from grpo_ext.rewards import resolve_process_reward_funcs

    arithmetic = get_task("arithmetic")
    assert arithmetic.has_step_verifier
    assert resolve_process_reward_funcs(["step"], arithmetic) == [arithmetic.step_reward]
    for task in (gsm8k, math_task, JSONLTask(path=str(GENERIC_FILE))):
        assert not task.has_step_verifier
        assert task.verify_steps("q", "a\nb") is None
        with pytest.raises(ValueError, match="has no step verifier"):
            task.step_reward(prompts=["q"], completions=["a"])
        with pytest.raises(ValueError, match="process_reward_funcs: task .* has no step verifier"):
            resolve_process_reward_funcs(["step"], task)


# ---- GSM8K --------------------------------------------------------------------------------------------------------


def test_gsm8k_loads_fixture_in_openai_format(gsm8k):
    data = gsm8k.load("test")
    assert data.column_names == ["prompt", "answer", "question", "solution"]
    assert data["answer"] == GSM8K_ANSWERS  # text after ####, commas stripped ("555,000" -> "555000")
    prompt = data["prompt"][0]
    assert data["question"][0] in prompt and prompt.endswith("Answer:")
    assert "\\boxed{" in prompt and "####" in prompt and "step" in prompt
    assert gsm8k.step_separator == "newline"
    assert len(gsm8k.load("test", n=3)) == 3
    # every reference solution (calculator annotations, "#### 555,000") scores as correct against its answer
    for solution, answer in zip(data["solution"], data["answer"], strict=True):
        assert gsm8k.is_correct(solution, answer)
    assert gsm8k.outcome_reward(prompts=[""] * 2, completions=["#### 405", "#### 404"], answer=["405", "405"]) == [
        1.0,
        0.0,
    ]


def test_gsm8k_fewshot_examples_are_worked_solutions_and_leave_the_eval_rows(tmp_path):
    task = GSM8KTask(data_files=str(GSM8K_FILE), num_fewshot=2, fewshot_seed=3)
    data = task.load("test")
    # one file serves both splits: the 2 exemplars are not also evaluated
    assert len(data) == 6
    prompt = data["prompt"][0]
    assert prompt.count("Question:") == 3 and prompt.count("####") >= 2 + 1  # 2 exemplars + the instruction
    assert "<<" not in prompt  # calculator annotations stripped
    for question, row_prompt in zip(data["question"], data["prompt"], strict=True):
        assert row_prompt.count(question) == 1  # the question asked is not one of the exemplars
    assert task.load("test")["prompt"] == data["prompt"]  # deterministic
    # the same file named for both splits: still never evaluate an exemplar
    same = GSM8KTask(data_files={"train": str(GSM8K_FILE), "test": str(GSM8K_FILE)}, num_fewshot=2)
    assert len(same.load("test")) == 6
    # a separate train file: the test split keeps all its rows
    train = tmp_path / "train.jsonl"
    train.write_text(GSM8K_FILE.read_text())
    separate = GSM8KTask(data_files={"train": str(train), "test": str(GSM8K_FILE)}, num_fewshot=2)
    assert len(separate.load("test")) == 8


def test_gsm8k_conversational_prompt():
    data = GSM8KTask(data_files=str(GSM8K_FILE), conversational=True).load("test", n=1)
    (message,) = data["prompt"][0]
    assert message["role"] == "user" and "Question:" in message["content"]


def test_gsm8k_default_source_is_the_hub(monkeypatch):
    calls = []

    def fake_load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        return Dataset.from_dict({"question": ["1+1?"], "answer": ["1+1=<<1+1=2>>2\n#### 2"]})

    monkeypatch.setattr(data_module, "load_dataset", fake_load_dataset)
    data = GSM8KTask().load("test")
    assert calls == [(("openai/gsm8k", "main"), {"split": "test"})]
    assert data["answer"] == ["2"]


def test_gsm8k_bad_sources(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        GSM8KTask(data_files=str(tmp_path / "nope.jsonl")).load("test")
    with pytest.raises(ValueError, match="no 'validation' split"):
        GSM8KTask(data_files={"test": str(GSM8K_FILE)}).load("validation")
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(json.dumps({"problem": "x", "solution": "y"}) + "\n")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['question', 'answer'\]"):
        GSM8KTask(data_files=str(wrong)).load("test")
    text = tmp_path / "gsm8k.txt"
    text.write_text("not a data file")
    with pytest.raises(ValueError, match="cannot tell the format"):
        GSM8KTask(data_files=str(text)).load("test")


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("She has 5 apples.\nSo the answer is \\boxed{12}.", "12"),
        ("#### 3\nActually \\boxed{4}", "4"),  # a box wins over ####
        ("\\boxed{7} then \\boxed{8} and finally \\boxed{9}", "9"),  # last box wins
        ("\\boxed{\\$1,234.50}", "1234.5"),
        ("\\boxed{18 \\text{ dollars}}", "18"),
        ("\\boxed{x = 5}", "5"),
        ("Step 1: 2 + 3 = 5\nStep 2: 5 * 4 = 20\n#### 20", "20"),
        ("#### $1,200.", "1200"),
        ("#### 5\nwhich is more than 3", "5"),  # the number after the last ####, not the last number
        ("#### 1\n#### 2", "2"),
        ("The total is 12.0", "12"),
        ("It ends at -0", "0"),
        ("5-3=2", "2"),  # a subtraction, not "-3"
        ("It drops to -7 degrees", "-7"),
        ("1,000,000 people", "1000000"),
        ("I have 3,4 and 5", "5"),
        ("no numbers here", None),
        ("", None),
        ("\\boxed{} and nothing", None),
        ("#### eighteen", None),
    ],
)
def test_gsm8k_answer_extraction(completion, expected):
    assert extract_gsm8k_answer(completion) == expected


def test_normalize_number():
    assert normalize_number(" $1,200.00 ") == "1200"
    assert normalize_number("-0.0") == "0"
    assert normalize_number("0.50") == "0.5"
    assert normalize_number("12.") == "12"
    assert normalize_number("seven") == "seven"


# ---- MATH ---------------------------------------------------------------------------------------------------------


def test_math_loads_fixture_in_hendrycks_format(math_task):
    data = math_task.load("test")
    assert data.column_names[:4] == ["prompt", "answer", "problem", "solution"]
    assert set(data.column_names[4:]) <= {"level", "type"}  # the slices, where the data has them
    assert data["answer"] == MATH_ANSWERS
    assert data["problem"][0] in data["prompt"][0] and "\\boxed{}" in data["prompt"][0]
    for solution, answer in zip(data["solution"], data["answer"], strict=True):
        assert math_task.is_correct(solution, answer), answer
    wrong = [
        math_task.is_correct(s, a)
        for s, a in zip(data["solution"], data["answer"][1:] + data["answer"][:1], strict=True)
    ]
    assert not any(wrong)
    easy = MathTask(data_files=str(MATH_FILE), levels=["Level 1"]).load("test")
    assert easy["answer"] == ["4", r"\frac{\sqrt{3}}{2}"]
    assert len(math_task.load("test", n=2)) == 2


def test_math_default_source_is_the_lighteval_copy(monkeypatch):
    calls = []

    def fake_load_dataset(*args, **kwargs):
        calls.append((args, kwargs))
        return Dataset.from_dict({"problem": ["1+1?"], "solution": ["It is $\\boxed{2}$."]})

    monkeypatch.setattr(data_module, "load_dataset", fake_load_dataset)
    assert MathTask().load("train")["answer"] == ["2"]
    assert calls == [(("DigitalLearningGmbH/MATH-lighteval", "default"), {"split": "train"})]


def test_math_solution_without_box_is_named(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"problem": "p", "solution": "The answer is 3."}) + "\n")
    with pytest.raises(ValueError, match=r"row 0: the solution has no \\boxed"):
        MathTask(data_files=str(bad)).load("test")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r"so $x = \boxed{4}$.", "4"),
        (r"\boxed{\frac{\sqrt{3}}{2}}", r"\frac{\sqrt{3}}{2}"),  # nested braces
        (r"\boxed{{a}{b}{\{1, 2\}}}", r"{a}{b}{\{1, 2\}}"),  # escaped braces do not count
        (r"\boxed{1} first, then \boxed{2}, finally \boxed{\dfrac{3}{4}}", r"\dfrac{3}{4}"),
        (r"the answer is $\boxed 5$.", "5"),
        (r"\fbox{-7}", "-7"),
        (r"\boxed {  12 }", "12"),
        (r"\boxed{\boxed{6}}", "6"),
        (r"\boxed{3} and then \boxed{\frac{1}{2", None),  # the last box is cut off: no final answer
        (r"no box at all: 42", None),
        (r"\boxed{}", None),
        (r"\boxedfoo{3}", None),
    ],
)
def test_last_boxed(text, expected):
    assert last_boxed(text) == expected


@pytest.mark.parametrize(
    ("reference", "equivalent", "different"),
    [
        (r"\frac{1}{2}", ["0.5", r"\dfrac12", r"\tfrac{1}{2}", "1/2", r"\frac{2}{4}", ".5"], [r"\frac{1}{3}", "2"]),
        (r"\frac{\sqrt{3}}{2}", [r"\frac{1}{2}\sqrt{3}", r"\dfrac{\sqrt3}{2}"], [r"\sqrt{3}", r"\frac{\sqrt{2}}{2}"]),
        (r"3\sqrt{5}", [r"\sqrt{45}", r"3 \sqrt 5"], [r"5\sqrt{3}"]),
        ("-7", ["-7.0", r"-\frac{14}{2}"], ["7", "-7.1"]),
        (r"(4, \infty)", [r"(4,\infty)", r"\left(4, \infty\right)"], [r"[4, \infty)", r"(-\infty, 4)"]),
        (r"\dfrac{7}{12}", [r"\frac{7}{12}", r"\frac{14}{24}"], [r"\frac{12}{7}"]),
    ],
)
def test_math_verify_equivalence(math_task, reference, equivalent, different):
    for answer in equivalent:
        assert math_task.is_correct(f"... so the answer is $\\boxed{{{answer}}}$.", reference), answer
    for answer in different:
        assert not math_task.is_correct(f"\\boxed{{{answer}}}", reference), answer


def test_math_answer_keys_group_equivalent_numbers(math_task):
    keys = {math_task.extract_answer(f"\\boxed{{{a}}}") for a in [r"\frac{1}{2}", "0.5", r"\dfrac12", r"\tfrac{1}{2}"]}
    assert keys == {"1/2"}
    assert math_task.normalize_answer(r"\frac{1}{2}") == "1/2"
    assert math_task.normalize_answer(r"Hence $\boxed{\frac12}$.") == "1/2"  # a full solution as the reference
    assert math_task.extract_answer("no box, just 0.5") is None
    assert not math_task.is_correct("no box, just 0.5", r"\frac{1}{2}")
    assert math_task.extract_answer(r"\boxed{\text{(B)}}") is not None


def test_math_checks_work_off_the_main_thread(math_task):
    cases = [
        (r"\boxed{0.5}", r"\frac{1}{2}"),
        (r"\boxed{\frac{1}{3}}", r"\frac{1}{2}"),
        (r"\boxed{2^{2^{2^{100}}}}", "5"),
    ]
    with ThreadPoolExecutor(2) as pool:
        verdicts = list(pool.map(lambda case: math_task.is_correct(*case), cases))
        keys = list(pool.map(lambda case: math_task.extract_answer(case[0]), cases))
    # a power tower is compared as text off the main thread (no timeout can stop SymPy there)
    assert verdicts == [True, False, False]
    assert keys[:2] == ["1/2", "1/3"] and keys[2] == "2^{2^{2^{100}}}"
    assert threading.current_thread() is threading.main_thread()


# ---- model text is never executed -------------------------------------------------------------------------------


def _adversarial_completions(marker: Path) -> list[str]:
    payloads = [
        f"__import__('os').system('touch {marker}')",
        f"open('{marker}', 'w').write('pwned')",
        f"exec(\"open('{marker}','w')\")",
        f"eval(compile(\"__import__('os').system('touch {marker}')\", 'x', 'exec'))",
        f"(lambda: __import__('pathlib').Path('{marker}').touch())()",
    ]
    completions = []
    for payload in payloads:
        completions += [
            payload,
            f"The answer is \\boxed{{{payload}}}",
            f"Step 1\n#### {payload}",
            f"$\\boxed{{{payload.replace('(', '{').replace(')', '}')}}}$",
            f"ANSWER: {payload}",
        ]
    return completions


def test_answer_checking_never_executes_model_text(tmp_path):
    marker = tmp_path / "pwned_marker"
    completions = _adversarial_completions(marker)
    tasks = [
        GSM8KTask(),
        MathTask(),
        JSONLTask(path=str(GENERIC_FILE)),
        JSONLTask(path=str(GENERIC_FILE), answer_regex=r"ANSWER: (.*)"),
    ]
    references = ["0", "5", r"\frac{1}{2}", "x"]

    def check_all():
        for task in tasks:
            for completion in completions:
                task.extract_answer(completion)
                for reference in references:
                    assert task.is_correct(completion, reference) in (True, False)
            task.outcome_reward(
                prompts=[""] * len(completions), completions=completions, answer=["1"] * len(completions)
            )

    check_all()
    with ThreadPoolExecutor(1) as pool:  # the no-timeout path of math-verify too
        pool.submit(check_all).result()
    assert not marker.exists()
    assert not list(tmp_path.iterdir())


# ---- generic JSONL ------------------------------------------------------------------------------------------------


def test_jsonl_loads_and_normalises():
    task = JSONLTask(path=str(GENERIC_FILE))
    data = task.load("train")
    assert data["answer"] == ["51", "48", "999", "2.5", "-7"]  # JSON numbers and strings alike
    assert data["prompt"][0] == "What is 17 times 3?"
    assert task.is_correct("17 * 3 = 51", "51") and task.is_correct("It is 2.50.", "2.5")
    assert task.extract_answer("nothing") is None
    assert len(task.load("test", n=2)) == 2


def test_jsonl_fields_regex_template_and_split_paths(tmp_path):
    (tmp_path / "train.jsonl").write_text(json.dumps({"q": "Capital of France?", "a": "Paris"}) + "\n\n")
    (tmp_path / "test.jsonl").write_text(json.dumps({"q": "Capital of Italy?", "a": "Rome"}) + "\n")
    task = JSONLTask(
        path=str(tmp_path / "{split}.jsonl"),
        question_field="q",
        answer_field="a",
        answer_regex=r"ANSWER:\s*(\w+)",
        prompt_template="Q: {question}\nEnd with ANSWER: <city> or \\boxed{city}.",
    )
    train, test = task.load("train"), task.load("test")
    assert train["answer"] == ["Paris"] and test["answer"] == ["Rome"]
    assert test["prompt"] == ["Q: Capital of Italy?\nEnd with ANSWER: <city> or \\boxed{city}."]
    assert task.extract_answer("ANSWER: Lyon ... ANSWER: Paris") == "Paris"
    assert task.is_correct("ANSWER: Rome", "Rome") and not task.is_correct("Rome", "Rome")
    whole = JSONLTask(path=str(GENERIC_FILE), answer_regex=r"-?\d+")  # no group: the whole match
    assert whole.extract_answer("3 then 4") == "4"


def test_jsonl_bad_input_errors_name_file_line_and_field(tmp_path):
    data = tmp_path / "data.jsonl"
    data.write_text('{"question": "a", "answer": 1}\n{"question": "b", "answer": 2}\n{"question": "c"}\n')
    with pytest.raises(ValueError, match=r"data\.jsonl line 3: no 'answer' field"):
        JSONLTask(path=str(data)).load("train")
    data.write_text('{"question": "a", "answer": 1}\n{"answer": 2}\n')
    with pytest.raises(ValueError, match=r"data\.jsonl line 2: no 'question' field"):
        JSONLTask(path=str(data)).load("train")
    data.write_text('{"question": "a", "answer": 1}\n\n{"question": "b", "answer": 2,}\n')
    with pytest.raises(ValueError, match=r"data\.jsonl line 3: invalid JSON"):
        JSONLTask(path=str(data)).load("train")
    data.write_text('["question", "answer"]\n')
    with pytest.raises(ValueError, match=r"data\.jsonl line 1: expected a JSON object, got list"):
        JSONLTask(path=str(data)).load("train")
    data.write_text("\n\n")
    with pytest.raises(ValueError, match=r"data\.jsonl: no rows"):
        JSONLTask(path=str(data)).load("train")
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        JSONLTask(path=str(tmp_path / "missing.jsonl")).load("train")
    with pytest.raises(ValueError, match="2 groups"):
        JSONLTask(path=str(data), answer_regex=r"(\d+)-(\d+)")
    with pytest.raises(ValueError, match="not a valid regex"):
        JSONLTask(path=str(data), answer_regex=r"(\d+")
    with pytest.raises(ValueError, match=r"must contain '\{question\}'"):
        JSONLTask(path=str(data), prompt_template="Q: {q}")
