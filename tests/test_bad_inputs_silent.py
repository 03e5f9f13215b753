"""The bad-input table for silent acceptances: inputs that were taken silently and wrongly, and user mistakes that
still printed a traceback. Each ends a CLI with one line naming the culprit and exit code 2, through the code path
the CLI takes; the table and its check are `tests/test_bad_inputs.py`'s."""

import shutil
from pathlib import Path

import pytest
import torch

from grpo_ext.model_paths import EMBEDDED_MODEL_DIR
from grpo_ext.script_args import parse_train_args
from scripts import publish, train
from tests.bad_inputs import (
    CONFIG,
    check_one_line,
    parse,
    reward,
    trainer,
    truncate,
    written,
    yaml_config,
)

COMPARE = Path("configs/compare.yaml").read_text()


def yaml_alone(text):
    """A training config holding only `text` (no key of configs/default.yaml repeated)."""
    return written("config.yaml", text, lambda path: parse_train_args(["--config", str(path)]))


def load_study(path):
    from grpo_ext.experiments.study.config import load_study

    return load_study(path)


def study_edit(old, new):
    """configs/compare.yaml with `old` replaced by `new`."""
    assert old in COMPARE
    return written("study.yaml", COMPARE.replace(old, new), load_study)


def method(name, *flags):
    def trigger(tmp):
        from grpo_ext.methods.config import parse_method_args

        return parse_method_args(["--config", f"configs/methods/{name}.yaml", "--output_dir", str(tmp), *flags])

    return trigger


def harness(*flags):
    def trigger(tmp):
        from grpo_ext.evaluation.cli import HarnessArgumentParser, add_harness_arguments, harness_settings

        return harness_settings(add_harness_arguments(HarnessArgumentParser(prog="passk_majk.py")).parse_args(flags))

    return trigger


def without_tokenizer(folder):
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).unlink()


def model_copy(damage, then):
    """`then(folder, tmp)` on a copy of the embedded model damaged by `damage(folder)`."""

    def trigger(tmp):
        folder = tmp / "model"
        shutil.copytree(EMBEDDED_MODEL_DIR, folder)
        damage(folder)
        return then(folder, tmp)

    return trigger


def train_with(folder, tmp):
    return train.main([*CONFIG, "--output_dir", str(tmp / "out"), "--model_name_or_path", str(folder)])


def harness_load(folder, tmp):
    from grpo_ext.evaluation.backends import load_model_and_tokenizer

    return load_model_and_tokenizer(str(folder), device="cpu")


def checkpoint(damage, resume=None):
    """A checkpoint-1 (the embedded model's weights, a trainer state, torch files) damaged by `damage(folder)`, then
    resumed by scripts/train.py (or by `resume(folder, tmp)`)."""

    def trigger(tmp):
        folder = tmp / "run" / "checkpoint-1"
        shutil.copytree(EMBEDDED_MODEL_DIR, folder)
        (folder / "trainer_state.json").write_text('{"global_step": 1}')
        torch.save({"state": {}, "param_groups": []}, folder / "optimizer.pt")
        torch.save({"python": None}, folder / "rng_state.pth")
        damage(folder)
        if resume is not None:
            return resume(folder, tmp)
        return train.main([*CONFIG, "--output_dir", str(folder.parent), "--resume_from_checkpoint", str(folder)])

    return trigger


def emptied(folder):
    shutil.rmtree(folder)
    folder.mkdir()


def load_rng_state(folder, tmp):
    """The trainer's own resume path (no up-front check): a file that opens but holds no RNG state is named."""
    from tests.trainer_utils import tiny_args, tiny_trainer

    tiny_trainer(args=tiny_args(tmp_path=tmp / "out"))._load_rng_state(str(folder))


def prm(format, **kwargs):
    from grpo_ext.rewards.prm import load_process_reward_model

    return lambda tmp: load_process_reward_model(EMBEDDED_MODEL_DIR, format, **kwargs)


def eval_report(text):
    def trigger(tmp):
        (tmp / "report").mkdir()
        (tmp / "report" / "report.json").write_text(text)
        argv = [str(EMBEDDED_MODEL_DIR), "--repo-id", "me/x", "--dry-run", "--output-dir", str(tmp / "up")]
        return publish.main([*argv, "--eval-report", str(tmp / "report")])

    return trigger


CASES = {
    # taken silently, and wrongly
    "abbreviated flag": (parse("--learning_rat", "0.5"), r"not used by the HfArgumentParser: \['--learning_rat'"),
    "abbreviated harness flag": (harness("--temp", "0.5"), "unrecognized arguments: --temp"),
    "abbreviated method flag": (method("rft", "--sample_temp", "2"), r"not used .*\['--sample_temp'"),
    "study: abbreviated override": (
        study_edit("overrides: {zero_std_groups: skip}", "overrides: {zero_std_group: skip}"),
        r"arms\.outcome_skip\.overrides: unknown field 'zero_std_group' for method 'grpo_outcome'",
    ),
    "study: repeated seed": (study_edit("seeds: [0, 1, 2]", "seeds: [0, 0]"), r"`seeds` repeats \[0\]"),
    "study: negative DPO beta": (
        study_edit("beta: [0.03, 0.1, 0.3]", "beta: [-1]"),
        r"arms\.dpo\.grid: beta: must be in \(0, inf\), got -1",
    ),
    "study: an arm's learning_rate override": (
        study_edit("overrides: {beta: 0.04}", "overrides: {beta: 0.04, learning_rate: 0.1}"),
        r"overrides\.learning_rate: the study searches learning_rate \(learning_rates\); set its values there",
    ),
    "methods: negative DPO beta": (method("dpo", "--beta", "-1"), r"beta: must be in \(0, inf\), got -1"),
    "harness: infinite temperature": (harness("--temperature", "inf"), "--temperature: must be a finite number"),
    "harness: negative seed": (harness("--seed", "-1"), r"--seed: must be in \[0, 4294967295\], got -1"),
    "YAML scalar in a list field": (
        yaml_alone("reward_funcs: outcome\n"),
        r"reward_funcs: .*config\.yaml gives the single value 'outcome' where a list is expected",
    ),
    "YAML key given twice": (
        yaml_config("learning_rate: 0.5\n"),
        r"--config: .*config\.yaml line \d+: key 'learning_rate' is given twice",
    ),
    "study: key given twice": (
        written("study.yaml", COMPARE + "seeds: [5]\n", load_study),
        r"study\.yaml line \d+: key 'seeds' is given twice",
    ),
    "jsonl task with data_files (README)": (
        lambda tmp: __import__("grpo_ext.tasks").tasks.get_task("jsonl", data_files="x.jsonl"),
        "task 'jsonl': bad task_kwargs .*unexpected keyword argument 'data_files'",
    ),
    # tracebacks for user mistakes, now one line
    "train: model folder without a tokenizer": (
        model_copy(without_tokenizer, train_with),
        r"model_name_or_path: .*model has no tokenizer \(expected one of tokenizer\.json",
    ),
    "harness: model folder without a tokenizer": (
        model_copy(without_tokenizer, harness_load),
        r"model: .*model has no tokenizer",
    ),
    "reward: wrong number of values": (reward([1.0]), "'bad_reward' returned 1 rewards for 2 completions"),
    "resume: truncated optimizer.pt": (
        checkpoint(lambda d: truncate(d / "optimizer.pt", 100)),
        r"resume_from_checkpoint: .*checkpoint-1/optimizer\.pt is torn or not a torch file",
    ),
    "resume: junk rng_state.pth": (
        checkpoint(lambda d: (d / "rng_state.pth").write_bytes(b"junk" * 50)),
        r"resume_from_checkpoint: .*checkpoint-1/rng_state\.pth is torn or not a torch file",
    ),
    "resume: rng_state.pth without an RNG state": (
        checkpoint(lambda d: None, resume=load_rng_state),
        r"resume_from_checkpoint: cannot load rng_state\*\.pth of .*checkpoint-1 \(TypeError: ",
    ),
    "resume: empty checkpoint folder": (
        checkpoint(emptied),
        r"resume_from_checkpoint: .*checkpoint-1 is not a checkpoint \(no trainer_state\.json\)",
    ),
    "resume: torn safetensors": (
        checkpoint(lambda d: truncate(d / "model.safetensors")),
        r"resume_from_checkpoint: .*checkpoint-1/model\.safetensors is not a valid file",
    ),
    "harness: torn safetensors": (
        model_copy(lambda d: truncate(d / "model.safetensors"), harness_load),
        r"model: .*model/model\.safetensors is not a valid file",
    ),
    "PRM: a causal LM without the step tag": (
        trainer(
            advantage_mode="process",
            process_reward_model=str(EMBEDDED_MODEL_DIR),
            process_reward_model_format="step_tag",
        ),
        "step_tag 'ки' is not in the vocabulary of the PRM's tokenizer",
    ),
    "PRM: qwen_prm on a Llama": (prm("qwen_prm"), r"qwen_prm: .*config\.json has model_type 'llama', expected 'qwen2'"),
    "PRM: not a PRM (random head)": (
        trainer(
            advantage_mode="process",
            process_reward_model=str(EMBEDDED_MODEL_DIR),
            process_reward_model_format="token_classification",
        ),
        r"process_reward_model: the weights in .*embedded have no score\.bias, score\.weight",
    ),
    "PRM: batch_size 0": (prm("step_tag", batch_size=0), "process_reward_model_batch_size: must be an integer >= 1"),
    "study: a metric the evaluation does not report": (
        study_edit("metric: pass@1", "metric: pass@99"),
        r"validation\.metric: expected pass@k or maj@k with k one of \[1, 2, 4, 8, 16\] \(n = 16\), got 'pass@99'",
    ),
    "methods: NaN sample_temperature": (
        method("rft", "--sample_temperature", "nan"),
        "sample_temperature: must be a finite number, got nan",
    ),
    "methods: DPO loss_type typo": (method("dpo", "--loss_type", "sigmod"), "loss_type: unknown value 'sigmod'"),
    "methods: SFT max_length 0": (method("sft", "--max_length", "0"), r"max_length: must be in \[1, inf\) or None"),
    "publish: a report that is not the harness's": (
        eval_report('{"models": 3}'),
        r"--eval-report: eval report .*report\.json: expected a 'models' list",
    ),
    "passk_eval_k as a scalar": (
        yaml_alone("passk_eval_k: 8\n"),
        "passk_eval_k: .*gives the single value 8 where a list is expected",
    ),
    "a model folder without weights for the harness": (
        model_copy(lambda d: (d / "model.safetensors").unlink(), harness_load),
        r"model: .*model has no weights",
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_bad_input_is_one_line_exit_2_naming_the_culprit(case, tmp_path, capsys):
    check_one_line(*CASES[case], tmp_path, capsys)


def test_scalar_strings_the_libraries_take_stay_allowed(tmp_path):
    """PEFT's `lora_target_modules: all-linear` is one string by design (ModelConfig keeps it): not refused."""
    path = tmp_path / "c.yaml"
    path.write_text("use_cpu: true\nbf16: false\nlora_target_modules: all-linear\n")
    _, _, model_args = parse_train_args(["--config", str(path)])
    assert model_args.lora_target_modules == "all-linear"


def test_a_sharded_checkpoint_passes_the_resume_check(tmp_path):
    """FSDP / DeepSpeed checkpoints keep their weights in subfolders (no safetensors file): not refused up front."""
    from grpo_ext.checkpoints import check_resumable

    (tmp_path / "trainer_state.json").write_text('{"global_step": 4}')
    (tmp_path / "pytorch_model_fsdp_0").mkdir()
    check_resumable(tmp_path)
