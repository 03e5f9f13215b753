"""What the bad-input tables (tests/test_bad_inputs*.py, tests/test_config_values.py) share: the builders of a bad
input (a config, a damaged model folder, a reward that returns the wrong thing, ...) and `check_one_line`, the check
that a CLI ends with exit code 2 and one line naming the culprit."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from grpo_ext.char_tokenizer import build_char_tokenizer
from grpo_ext.cli import run_cli
from grpo_ext.evaluation.cache import SampleCache
from grpo_ext.model_paths import EMBEDDED_MODEL_DIR
from grpo_ext.rewards.checked import checked_reward_func
from grpo_ext.rewards.process import score_steps
from grpo_ext.script_args import parse_train_args
from scripts import iterative, publish, train
from tests.trainer_utils import TASK, tiny_args, tiny_trainer

TOKENIZER = build_char_tokenizer()
CONFIG = ["--config", "configs/default.yaml"]


def parse(*flags):
    return lambda tmp: parse_train_args([*CONFIG, "--output_dir", str(tmp), *flags])


def run_train(*flags):
    """scripts/train.py's main up to the point where it fails (bad input fails before any training)."""
    return lambda tmp: train.main([*CONFIG, "--output_dir", str(tmp / "out"), *flags])


def yaml_config(text):
    """configs/default.yaml with `text` appended (a repeated key: the last one wins)."""

    def trigger(tmp):
        path = tmp / "config.yaml"
        path.write_text(Path(CONFIG[1]).read_text() + text)
        return parse_train_args(["--config", str(path), "--output_dir", str(tmp)])

    return trigger


def reward(values):
    def bad_reward(prompts, completions, **kwargs):
        if isinstance(values, Exception):
            raise values
        return values

    return lambda tmp: checked_reward_func(bad_reward)(["a"] * 2, ["b"] * 2)


def steps(returned, completions=("1+2=3;#3",)):
    ids = [TOKENIZER(c, add_special_tokens=False).input_ids for c in completions]

    def bad_steps(prompts, completions, **kwargs):
        if isinstance(returned, Exception):
            raise returned
        return returned

    return lambda tmp: score_steps([bad_steps], TOKENIZER, ";", ["1+2="] * len(ids), list(completions), ids, {})


def trainer(**overrides):
    process = [TASK.step_reward] if overrides.get("advantage_mode") == "process" else None
    return lambda tmp: tiny_trainer(args=tiny_args(tmp_path=tmp, **overrides), process_reward_funcs=process)


def model_folder(damage):
    def trigger(tmp):
        folder = tmp / "model"
        shutil.copytree(EMBEDDED_MODEL_DIR, folder)
        damage(folder)
        return tiny_trainer(args=tiny_args(tmp_path=tmp / "out"), model=str(folder))

    return trigger


def truncate(path, size=1000):
    with open(path, "r+b") as handle:
        handle.truncate(size)


def publish_folder(prepare, *flags):
    def trigger(tmp):
        folder = tmp / "ckpt"
        shutil.copytree(EMBEDDED_MODEL_DIR, folder)
        prepare(folder)
        return publish.main([str(folder), "--repo-id", "me/x", "--dry-run", "--output-dir", str(tmp / "up"), *flags])

    return trigger


def adapter_with_local_base(folder):
    (folder / "model.safetensors").unlink()
    (folder / "config.json").unlink()
    save_file({"lora": torch.zeros(1)}, folder / "adapter_model.safetensors")
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(folder.parent)}))


def resume_with_state(text):
    def trigger(tmp):
        checkpoint = tmp / "checkpoint-1"
        checkpoint.mkdir()
        (checkpoint / "grpo_ext_state.json").write_text(text)
        t = tiny_trainer(args=tiny_args(tmp_path=tmp))
        t.create_optimizer_and_scheduler(num_training_steps=1)
        t._load_optimizer_and_scheduler(str(checkpoint))

    return trigger


def iterative_flags(*flags):
    return lambda tmp: iterative.parse_args(["--config", "configs/iterative.yaml", "--output_dir", str(tmp), *flags])


def config(**fields):
    """A GRPOExtConfig built in code (not through the parser): its own checks must give the one line."""
    return lambda tmp: tiny_args(tmp_path=tmp, **fields)


def written(name, text, then):
    """`then(path)` on a file `name` holding `text` (str, or bytes for a file that is not UTF-8)."""

    def trigger(tmp):
        path = tmp / name
        path.write_bytes(text) if isinstance(text, bytes) else path.write_text(text)
        return then(path)

    return trigger


def jsonl_task(path):
    from grpo_ext.tasks import get_task

    return get_task("jsonl", path=str(path)).load("train")


def gsm8k_rows(path):
    from grpo_ext.tasks import get_task

    return get_task("gsm8k", data_files=str(path)).load("train")


def study_with(old, new):
    """configs/compare.yaml with `old` replaced by `new` (a key given twice is an error of its own)."""
    from grpo_ext.experiments.study.config import load_study

    text = Path("configs/compare.yaml").read_text()
    assert old in text
    return written("study.yaml", text.replace(old, new), load_study)


def method_config(path):
    from grpo_ext.methods.config import parse_method_args

    return parse_method_args(["--config", str(path), "--output_dir", str(path.parent / "out")])


def runs(*specs):
    from grpo_ext.experiments.compare.runs import parse_runs

    return lambda tmp: parse_runs(list(specs))


def task(name, **knobs):
    from grpo_ext.tasks import get_task

    return lambda tmp: get_task(name, **knobs)


def reward_path(value):
    from grpo_ext.rewards import load_callable

    return lambda tmp: load_callable(value, "reward_funcs")


def quantised_without_lora(tmp):
    from trl import ModelConfig

    from grpo_ext.policy_loading import check_model_args

    check_model_args(ModelConfig(model_name_or_path="embedded", load_in_4bit=True))


def adapter_config(text):
    def trigger(tmp):
        from grpo_ext.evaluation.backends import load_model_and_tokenizer

        (tmp / "adapter").mkdir()
        (tmp / "adapter" / "adapter_config.json").write_text(text)
        return load_model_and_tokenizer(str(tmp / "adapter"), device="cpu")

    return trigger


def cache_written_by_another_run(tmp):
    record = dict(model="m", model_fingerprint=None, task="t", problem_id=0, sample_index=0, params="p")
    record.update(prompt="1+1=", completion="2")
    cache = SampleCache(tmp / "samples.jsonl")
    cache.append([record])
    with open(tmp / "samples.jsonl", "a") as handle:  # a second writer
        handle.write(json.dumps({**record, "sample_index": 1}) + "\n")
    cache.append([{**record, "sample_index": 2}])


def never_scored(tmp):
    args = tiny_args(tmp_path=tmp, max_steps=1)
    trainer = tiny_trainer(args=args, reward_funcs=[lambda completions, **kw: [None] * len(completions)])
    trainer.train()  # TRL's contract: a warning
    trainer.check_rewards_were_scored()  # what the command lines call after it


def check_one_line(trigger, message, tmp_path, capsys):
    """`trigger(tmp_path)` run as a CLI's main ends with exit code 2 and one `error:` line matching `message`."""
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda argv: trigger(tmp_path), [])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in err, err[-2000:]
    assert re.search(message, errors[0]), errors[0]
