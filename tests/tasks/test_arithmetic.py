import pytest

from grpo_ext.tasks import get_task
from grpo_ext.tasks.arithmetic import ArithmeticTask, Problem, split_of


def test_generator_is_deterministic_and_seed_dependent():
    a = ArithmeticTask(seed=3).load("train", 200)
    b = ArithmeticTask(seed=3).load("train", 200)
    c = ArithmeticTask(seed=4).load("train", 200)
    assert a["prompt"] == b["prompt"] and a["solution"] == b["solution"]
    assert a["prompt"] != c["prompt"]


def test_splits_are_disjoint_across_seeds_and_sizes():
    train = set(ArithmeticTask(seed=0).load("train", 5000)["prompt"]) | set(
        ArithmeticTask(seed=7).load("train", 2000)["prompt"]
    )
    test = set(ArithmeticTask(seed=0).load("test", 500)["prompt"]) | set(
        ArithmeticTask(seed=9).load("test", 500)["prompt"]
    )
    validation = set(ArithmeticTask(seed=0).load("validation", 500)["prompt"]) | set(
        ArithmeticTask(seed=5).load("validation", 500)["prompt"]
    )
    sft = set(ArithmeticTask(seed=0).load("sft", 5000)["prompt"]) | set(
        ArithmeticTask(seed=3).load("sft", 2000)["prompt"]
    )
    splits = {"sft": sft, "train": train, "validation": validation, "test": test}
    for name, prompts in splits.items():
        assert all(split_of(p) == name for p in prompts)
        assert all(prompts.isdisjoint(other) for other_name, other in splits.items() if other_name != name)
    # test and validation a tenth of all prompts each (the hash buckets), the base's SFT set and RL's prompts 40% each
    share = [split_of(f"{a}+{b}=") for a in range(100) for b in range(100)]
    assert 0.07 < share.count("test") / len(share) < 0.13 and 0.07 < share.count("validation") / len(share) < 0.13
    assert 0.36 < share.count("sft") / len(share) < 0.44 and 0.36 < share.count("train") / len(share) < 0.44


def test_difficulty_knobs():
    rows = ArithmeticTask(min_operands=3, max_operands=3, digits=1, operators="*", seed=0).load("train", 50)
    for prompt, solution in zip(rows["prompt"], rows["solution"], strict=False):
        problem = Problem.from_prompt(prompt)
        assert len(problem.operands) == 3 and all(x < 10 for x in problem.operands)
        assert set(problem.operators) == {"*"}
        assert solution.count(";") == 2  # two operations + the answer line


def test_reference_solution_hand_worked():
    problem = Problem.from_prompt("37+45-18=")
    assert problem.solution == "37+45=82;82-18=64;#64"
    assert problem.answer == 64
    assert Problem.from_prompt("5-9*3=").solution == "5-9=-4;-4*3=-12;#-12"  # left to right, negative carried


TASK = ArithmeticTask()


@pytest.mark.parametrize(
    "completion, expected_steps, outcome",
    [
        ("37+45=82;82-18=64;#64", [1, 1, 1], True),
        ("37+45=83;83-18=65;#65", [0, 1, 0], False),  # wrong arithmetic, then a correctly carried operand
        ("37+45=82;83-18=65;#65", [1, 0, 0], False),  # wrong carried operand (83 instead of 82)
        ("37+45=82;82-18=64", [1, 1], False),  # missing answer line
        ("37+45=82;82+18=100;#100", [1, 0, 0], False),  # not the problem's operation
        ("hello world", [0], False),  # garbage
        ("", [], False),  # empty completion: no step
        ("37+45=82;82-18=64;#64;#64", [1, 1, 1, 0], True),  # a second answer line is not a step
        ("37+45=82;82-18=64;#064", [1, 1, 1], True),  # answers are normalised integers
        ("37+45=82;82-18=64;", [1, 1], False),  # trailing separator opens no step
    ],
)
def test_verifiers_hand_worked(completion, expected_steps, outcome):
    assert TASK.verify_steps("37+45-18=", completion) == expected_steps
    assert TASK.is_correct(completion, "64") is outcome


def test_reward_functions_have_trl_signature():
    prompts = ["37+45-18=", "1+2="]
    completions = ["37+45=82;82-18=64;#64", "1+2=4;#4"]
    assert TASK.outcome_reward(prompts=prompts, completions=completions, answer=["64", "3"], trainer_state=None) == [
        1.0,
        0.0,
    ]
    assert TASK.step_reward(prompts=prompts, completions=completions, answer=["64", "3"]) == [[1, 1, 1], [0, 0]]
    conversational = [[{"role": "assistant", "content": "1+2=3;#3"}]]
    assert TASK.outcome_reward(
        prompts=[[{"role": "user", "content": "1+2="}]], completions=conversational, answer=["3"]
    ) == [1.0]


def test_answer_extraction():
    assert TASK.extract_answer("1+2=3;#3") == "3"
    assert TASK.extract_answer("#-007") == "-7"
    assert TASK.extract_answer("1+2=3;") is None
    assert TASK.extract_answer("#x") is None


def test_bad_task_input_names_the_culprit():
    with pytest.raises(ValueError, match="unknown task 'arithmetc'.*arithmetic"):
        get_task("arithmetc")
    with pytest.raises(ValueError, match="bad task_kwargs"):
        get_task("arithmetic", n_digits=3)
    with pytest.raises(ValueError, match="operators"):
        ArithmeticTask(operators="+/")
    with pytest.raises(ValueError, match="split"):
        TASK.load("dev", 3)
    with pytest.raises(ValueError, match="not an arithmetic prompt"):
        TASK.verify_steps("what is 2+2?", "#4")
