"""Table-driven: each bad input ends a CLI with one line naming the culprit and exit code 2 (`run_cli`), through the
code path the CLI takes (scripts/train.py's parser, the trainer, the reward wrappers, scripts/publish.py, ...).
Internal bugs are not dressed up as bad input: they keep their traceback."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from datasets import Dataset

from grpo_ext.cli import run_cli
from grpo_ext.errors import UserError
from grpo_ext.evaluation.metrics import maj_at_k, pass_at_k
from grpo_ext.model_paths import EMBEDDED_MODEL_DIR
from grpo_ext.rewards.checked import checked_reward_func
from grpo_ext.script_args import TaskArguments, parse_train_args
from grpo_ext.tasks.base import require_prompt_column
from scripts import publish, train
from tests.bad_inputs import (
    CONFIG,
    adapter_config,
    adapter_with_local_base,
    cache_written_by_another_run,
    check_one_line,
    config,
    gsm8k_rows,
    iterative_flags,
    jsonl_task,
    method_config,
    model_folder,
    never_scored,
    parse,
    publish_folder,
    quantised_without_lora,
    resume_with_state,
    reward,
    reward_path,
    run_train,
    runs,
    steps,
    study_with,
    task,
    trainer,
    truncate,
    written,
    yaml_config,
)
from tests.trainer_utils import tiny_args, tiny_trainer

CASES = {
    # scripts/train.py: the parser and the configs' checks
    "unknown advantage_mode": (parse("--advantage_mode", "processs"), "advantage_mode: unknown value 'processs'"),
    "unknown zero_std_groups": (parse("--zero_std_groups", "drop"), "zero_std_groups.*invalid choice: 'drop'"),
    "unknown zero_std_groups in YAML": (yaml_config("zero_std_groups: drop\n"), "zero_std_groups: unknown value"),
    "unknown kl_controller": (parse("--kl_controller", "pid"), "kl_controller.*'pid'"),
    "adaptive with beta 0": (parse("--kl_controller", "adaptive", "--beta", "0"), "needs beta > 0"),
    "target_kl <= 0": (
        parse("--kl_controller", "adaptive", "--beta", "0.1", "--target_kl", "-1"),
        r"target_kl: must be in \(0, inf\), got -1",
    ),
    "kl_horizon <= 0": (
        parse("--kl_controller", "adaptive", "--beta", "0.1", "--kl_horizon", "0"),
        r"kl_horizon: must be in \(0, inf\), got 0",
    ),
    "beta_max < beta_min": (
        parse("--kl_controller", "adaptive", "--beta", "0.1", "--beta_max", "1e-9"),
        r"beta_max: must be in \[1e-06, inf\), got 1e-09",
    ),
    "adaptive beta outside its bounds": (
        parse("--kl_controller", "adaptive", "--beta", "0.1", "--beta_max", "0.05"),
        r"beta: the adaptive controller starts at beta, which must lie in \[beta_min, beta_max\]",
    ),
    "beta_max NaN": (parse("--kl_controller", "adaptive", "--beta", "0.1", "--beta_max", "nan"), "beta_max"),
    "negative max_refill_rounds": (parse("--max_refill_rounds", "-1"), "max_refill_rounds: must be"),
    "empty step_separator": (yaml_config("step_separator: ''\n"), "step_separator: must be a non-empty string"),
    "batch not made of whole groups": (
        parse("--per_device_train_batch_size", "6", "--num_generations", "4"),
        r"generation_batch_size \(6\) must be divisible by num_generations \(4\)",
    ),
    "negative beta": (parse("--beta", "-0.1"), r"beta: must be in \[0, inf\), got -0.1"),
    "temperature 0": (parse("--temperature", "0"), r"temperature: must be in \(0, inf\)"),
    "top_p above 1": (parse("--top_p", "1.5"), r"top_p: must be in \(0, 1\]"),
    "min_p above 1": (parse("--min_p", "2"), "min_p: must be in"),
    "negative top_k": (parse("--top_k", "-3"), "top_k: must be in"),
    "negative learning_rate": (parse("--learning_rate=-1e-3"), "learning_rate: must be in"),
    "zero batch size": (parse("--per_device_train_batch_size", "0"), "per_device_train_batch_size: must be in"),
    "zero num_iterations": (parse("--num_iterations", "0"), "num_iterations: must be in"),
    "zero max_completion_length": (parse("--max_completion_length", "0"), "max_completion_length: must be in"),
    "negative epsilon": (parse("--epsilon", "-0.2"), "epsilon: must be in"),
    "negative seed": (parse("--seed", "-1"), "seed: must be in"),
    "max_steps 0": (parse("--max_steps", "0"), r"max_steps: must be in \[1, inf\) or -1"),
    "one generation per prompt": (parse("--num_generations", "1"), "at least 2 generations per prompt"),
    "unknown scale_rewards": (parse("--scale_rewards", "xyz"), "scale_rewards: unknown value 'xyz'"),
    "unknown loss_type": (parse("--loss_type", "foo"), "loss_type: unknown value 'foo'"),
    "not a number": (parse("--max_steps", "abc"), "--max_steps.*invalid int value: 'abc'"),
    "unknown flag": (parse("--lerning_rate", "1e-4"), "lerning_rate"),
    "unknown YAML key": (yaml_config("lerning_rate: 0.0001\n"), "lerning_rate"),
    "YAML that does not parse": (yaml_config("beta: [0.1\n"), r"--config: .*config\.yaml is not a valid file"),
    "missing --config file": (
        lambda tmp: parse_train_args(["--config", str(tmp / "nope.yaml")]),
        r"nope\.yaml: No such file or directory",
    ),
    "task_kwargs not JSON": (parse("--task_kwargs", "{digits: 3"), "task_kwargs: expected a JSON object"),
    "train_size 0": (parse("--train_size", "0"), "train_size: must be in"),
    "passk_eval_n 0": (parse("--passk_eval_n", "0"), "passk_eval_n: must be in"),
    "passk_eval_k above n": (
        parse("--passk_eval_steps", "5", "--passk_eval_n", "4", "--passk_eval_k", "1", "8"),
        "passk_eval_k: every k must be <= passk_eval_n",
    ),
    "no reward function": (lambda tmp: TaskArguments(reward_funcs=[]), "reward_funcs: at least one"),
    "unknown task": (run_train("--task", "gsm9k"), "unknown task 'gsm9k'"),
    "unknown task knob": (run_train("--task_kwargs", '{"digitz": 3}'), "task 'arithmetic': bad task_kwargs"),
    "resume from a folder that does not exist": (
        run_train("--resume_from_checkpoint", "outputs/run/checkpoint-9"),
        "resume_from_checkpoint: no such checkpoint folder: outputs/run/checkpoint-9",
    ),
    "missing model folder": (
        run_train("--model_name_or_path", "./no/such/model"),
        "model_name_or_path: no such model folder",
    ),
    # the trainer: combinations, model folders, a run that scored nothing
    "process mode without a source": (
        lambda tmp: tiny_trainer(args=tiny_args(tmp_path=tmp, advantage_mode="process")),
        "process_reward_funcs or",
    ),
    "process mode with batch scaling": (
        trainer(advantage_mode="process", scale_rewards="batch"),
        "scale_rewards: `batch` is not supported with advantage_mode `process`",
    ),
    "online RFT with batch scaling": (
        trainer(advantage_mode="online_rft", scale_rewards="batch"),
        "scale_rewards: `batch` is not supported with advantage_mode `online_rft`",
    ),
    "process mode with normalize_then_sum": (
        trainer(
            advantage_mode="process",
            multi_objective_aggregation="normalize_then_sum",
        ),
        "multi_objective_aggregation: `normalize_then_sum` is not supported",
    ),
    "skip with an entropy bonus": (
        trainer(zero_std_groups="skip", loss_type="bnpo", entropy_coef=0.01),
        "cannot be combined with an entropy bonus",
    ),
    "truncated weights": (
        model_folder(lambda d: truncate(d / "model.safetensors")),
        r"model_name_or_path: .*model\.safetensors is not a valid file",
    ),
    "folder without weights": (
        model_folder(lambda d: (d / "model.safetensors").unlink()),
        r"model_name_or_path: .*model has no weights",
    ),
    "no reward ever scored": (never_scored, "reward_funcs: no completion was scored .* in 1 steps"),
    "resume: state file not JSON": (resume_with_state("{kl"), r"resume_from_checkpoint: cannot read .*grpo_ext_state"),
    "resume: unknown controller": (
        resume_with_state('{"kl_controller": {"type": "pid", "beta": 0.1}, "refill_draws": 0}'),
        "unknown KL controller type 'pid'",
    ),
    # reward functions (the user's code)
    "reward not a number": (reward([1.0, "yes"]), "reward function 'bad_reward': completion 1 got 'yes'"),
    "reward infinite": (reward([math.inf, 0.0]), "'bad_reward': completion 0 got an infinite reward"),
    "reward raises": (reward(KeyError("answer")), "reward function 'bad_reward' raised KeyError: 'answer'"),
    "reward not a list": (reward(0.5), "'bad_reward' returned float; expected a list"),
    "reward a dict": (reward({"a": 1.0}), "'bad_reward' returned dict; expected a list"),
    "reward a 2-D array": (
        reward(np.ones((2, 1))),
        r"'bad_reward': completion 0 got array\(\[1\.\]\); expected a float",
    ),
    "process: wrong number of completions": (steps([[1.0, 1.0], [1.0]]), "returned 2 results for 1 completions"),
    "process: wrong number of step scores": (steps([[1.0]]), "returned 1 step scores for completion 0, which has 2"),
    "process: non-number step score": (
        steps([[1.0, "ok"]]),
        "process reward function .*: completion 0 got 'ok'; expected a float or None",
    ),
    "process: infinite step score": (steps([[1.0, -math.inf]]), "infinite step score"),
    "process: function raises": (steps(ZeroDivisionError("x")), "process reward function 'bad_steps' raised"),
    # scripts/publish.py
    "publish a run that did not finish": (
        publish_folder(lambda d: (d / "grpo_ext_run.json").write_text('{"status": "failed", "error": "disk full"}')),
        r"did not finish \(grpo_ext_run\.json: failed: disk full\)",
    ),
    "publish torn weights": (
        publish_folder(lambda d: truncate(d / "model.safetensors")),
        r"CHECKPOINT: .*model\.safetensors is not a valid file",
    ),
    "publish an adapter whose base is a local folder": (
        publish_folder(adapter_with_local_base),
        "names the local base model .*pass --base-model",
    ),
    "publish --base-model a local folder": (
        publish_folder(lambda d: None, "--base-model", str(EMBEDDED_MODEL_DIR)),
        "--base-model: .* is a local folder",
    ),
    "publish a folder that does not exist": (
        lambda tmp: publish.main(["org/model", "--repo-id", "me/x", "--dry-run"]),
        "CHECKPOINT: no such folder: org/model",
    ),
    # the evaluation cache
    "cache written by two runs": (cache_written_by_another_run, "samples.jsonl changed while this run was using it"),
    # GRPOExtConfig built in code: its own checks and TRL's ranges (scripts/train.py's parser wraps them too)
    "config: unknown advantage_mode": (config(advantage_mode="proces"), "advantage_mode: unknown value 'proces'"),
    "config: unknown zero_std_groups": (config(zero_std_groups="drop"), "zero_std_groups: unknown value 'drop'"),
    "config: PRM field without a PRM": (
        config(process_reward_model_step_tag="ки"),
        "process_reward_model_step_tag: set without process_reward_model",
    ),
    "config: temperature 0": (config(temperature=0.0), r"temperature: must be in \(0, inf\)"),
    # scripts/iterative.py
    "iterative: replay_ratio above 1": (iterative_flags("--replay_ratio", "1.5"), r"replay_ratio: must be in \[0, 1\]"),
    "iterative: zero iterations": (iterative_flags("--iterations", "0"), "iterations: must be an integer >= 1, got 0"),
    "iterative: zero rm_learning_rate": (iterative_flags("--rm_learning_rate", "0"), "rm_learning_rate: must be > 0"),
    # tasks and their data
    "task: unknown name": (task("gsm9k"), "unknown task 'gsm9k'; known tasks: arithmetic"),
    "task: bad knob value": (task("arithmetic", digits=0), "arithmetic: digits must be >= 1, got 0"),
    "task: empty step rule": (task("gsm8k", step_separator=""), "task 'gsm8k': step_separator must be a non-empty"),
    "task: jsonl regex": (task("jsonl", path="x.jsonl", answer_regex="(("), "jsonl: answer_regex '\\(\\(' is not"),
    "task: too many arithmetic problems": (
        lambda tmp: task("arithmetic", min_operands=2, max_operands=2, digits=1)(tmp).load("test", 100),
        "arithmetic: only .* distinct test problems exist for these knobs, asked 100",
    ),
    "jsonl: invalid JSON line": (
        written("data.jsonl", '{"question": "1+1", "answer": "2"}\n{"question": \n', jsonl_task),
        r"data\.jsonl line 2: invalid JSON",
    ),
    "jsonl: a line without the answer": (
        written("data.jsonl", '{"question": "1+1"}\n', jsonl_task),
        r"data\.jsonl line 1: no 'answer' field",
    ),
    "jsonl: not UTF-8": (written("data.jsonl", b"\xff\xfe{}\n", jsonl_task), r"jsonl: cannot read .*data\.jsonl"),
    "data file that does not parse": (
        written("train.jsonl", '{"question": "q", "answer": "#### 1"}\n{bad\n', gsm8k_rows),
        r"data_files: cannot read .*train\.jsonl: ArrowInvalid",
    ),
    "data file without a column": (
        written("train.jsonl", '{"question": "q"}\n', gsm8k_rows),
        r"train\.jsonl: missing column\(s\) \['answer'\]",
    ),
    "dataset without a prompt column": (
        lambda tmp: require_prompt_column(Dataset.from_dict({"question": ["q"]}), "data.jsonl"),
        "data.jsonl: dataset has no 'prompt' column",
    ),
    "empty dataset": (
        lambda tmp: require_prompt_column(Dataset.from_dict({"prompt": []}), "data.jsonl"),
        "data.jsonl: dataset is empty",
    ),
    # reward functions and model arguments
    "reward function given as a file path": (reward_path("my_rewards.py"), "looks like a file path"),
    "reward function path with a folder": (reward_path("src/rewards.score"), "'src/rewards.score' is neither"),
    "reward function not importable": (reward_path("no_such_module.score"), "reward_funcs: cannot import"),
    "4-bit without LoRA": (quantised_without_lora, "load_in_4bit: quantised weights cannot be trained directly"),
    "missing model folder under an existing folder": (
        lambda tmp: train.main([*CONFIG, "--output_dir", str(tmp), "--model_name_or_path", "configs/no_such_model"]),
        r"no such model folder: configs/no_such_model \(configs/ exists here",
    ),
    "adapter config not JSON": (adapter_config("{r: 8"), r"adapter_config\.json: not valid JSON"),
    "adapter config without a base": (adapter_config("{}"), "names no base_model_name_or_path"),
    "unknown sampling backend": (
        lambda tmp: __import__("grpo_ext.evaluation.backends").evaluation.backends.load_backend("embedded", "tpu"),
        "unknown backend 'tpu'",
    ),
    # methods: configs, --run, studies
    "method config: unknown method": (written("m.yaml", "method: ppo\n", method_config), "unknown method 'ppo'"),
    "method config: YAML that does not parse": (
        written("m.yaml", "method: [rft\n", method_config),
        r"--config: .*m\.yaml is not a valid file",
    ),
    "method config: bad field": (
        written(
            "m.yaml",
            Path("configs/methods/rft.yaml").read_text().replace("samples_per_prompt: 8", "samples_per_prompt: 0"),
            method_config,
        ),
        r"samples_per_prompt: must be in \[1, inf\), got 0",
    ),
    "--run: unknown method": (runs("ppo=embedded"), "--run 'ppo=embedded': unknown method 'ppo'"),
    "--run: no checkpoint": (runs("rft"), "--run 'rft': expected NAME=CHECKPOINT"),
    "--run: repeated name": (runs("base=embedded", "base=embedded"), "--run names must be unique; repeated: base"),
    "study: learning rates not numbers": (
        study_with("learning_rates: [5.0e-5,", "learning_rates: [fast,"),
        "`learning_rates` must be a",
    ),
    "study: extension naming no arm": (
        study_with("extensions:\n", "extensions:\n  x: {arm: nope, against: sft}\n"),
        r"study\.yaml: extensions\.x\.arm: unknown arm 'nope'",
    ),
    "study: unknown evaluation field": (
        study_with("  n: 64\n", "  n: 64\n  temp: 1\n"),
        r"test: unknown field\(s\) \['temp'\]",
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_bad_input_is_one_line_exit_2_naming_the_culprit(case, tmp_path, capsys):
    check_one_line(*CASES[case], tmp_path, capsys)


def test_table_is_big_enough():
    assert len(CASES) >= 45


def test_internal_bugs_keep_their_traceback():
    """A KeyError, TypeError or plain ValueError from our own code is a bug, not bad input: run_cli re-raises it."""
    for bug in (KeyError("x"), TypeError("x"), ValueError("x"), RuntimeError("x")):

        def main(argv, bug=bug):
            raise bug

        with pytest.raises(type(bug)):
            run_cli(main, [])


def test_disk_errors_name_the_file(tmp_path, capsys):
    def main(argv):
        raise OSError(28, "No space left on device", str(tmp_path / "report.json"))

    with pytest.raises(SystemExit):
        run_cli(main, [])
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'report.json'}: No space left on device")


def test_user_error_is_a_value_error():
    """Code and tests that catch ValueError keep working."""
    assert issubclass(UserError, ValueError)


def test_library_misuse_is_a_value_error_naming_the_argument():
    """Pure functions called with bad arguments (a caller's bug, not a CLI's input) raise ValueError by name."""
    with pytest.raises(ValueError, match="k"):
        pass_at_k(4, 1, 8)
    with pytest.raises(ValueError, match="len"):
        maj_at_k(["1", "2"], [True], 1)


def test_documented_fallbacks_none_and_nan_mean_missing():
    """None or NaN from a reward function is not an error: the completion (or step) is treated as unscored."""
    wrapped = checked_reward_func(lambda prompts, completions, **kw: [None, math.nan, 1.0])
    assert wrapped(["a"] * 3, ["b"] * 3)[:1] == [None]
    scored = steps([[1.0, None]])(None)
    assert scored[0].scores[0] == 1.0 and math.isnan(scored[0].scores[1])


def test_numpy_rewards_are_what_trl_accepts():
    """Bug 3: TRL accepts NumPy arrays, NumPy scalars, bools and tensors; so does the check, unchanged."""
    values = [np.float32(0.5), np.int64(1), True, None, torch.tensor(0.25), np.array(2.0)]
    wrapped = checked_reward_func(lambda prompts, completions, **kw: values)
    assert wrapped(["a"] * 6, ["b"] * 6) == values
    as_array = checked_reward_func(lambda prompts, completions, **kw: np.array([0.0, 1.0]))
    out = as_array(["a"] * 2, ["b"] * 2)
    as_trl = torch.tensor([r if r is not None else torch.nan for r in out], dtype=torch.float32)
    assert torch.equal(as_trl, torch.tensor([0.0, 1.0]))
    scored = steps(np.array([[np.float32(0.5), np.int64(1)]]))(None)  # process scores: the same types
    assert scored[0].scores == [0.5, 1.0]
