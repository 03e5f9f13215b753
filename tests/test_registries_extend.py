"""Each registry is the only file a new entry touches: a toy KL controller, zero-std strategy, task, PRM format,
method and metric, each registered here, work end to end (config check, training or scoring, checkpoint, model card
or report) without an edit anywhere else in the package."""

from __future__ import annotations

import pytest
import torch

from grpo_ext.errors import UserError

# ---- a KL controller ------------------------------------------------------------------------------------------------


class HalvingKLController:
    """Toy: beta halves at every optimizer step, whatever the KL."""

    def __init__(self, beta: float) -> None:
        self.beta = beta

    def update(self, current_kl: float, n_samples: int) -> float:
        self.beta /= 2
        return self.beta

    def state_dict(self) -> dict:
        return {"type": "halving", "beta": self.beta}

    def load_state_dict(self, d: dict) -> None:
        self.beta = d["beta"]

    def resume(self, saved: dict) -> list[str]:
        self.beta = saved["beta"]
        return ["beta: the halving controller goes on from the checkpoint's"]


@pytest.fixture
def halving_kl():
    from grpo_ext.kl_control import KL_CONTROLLERS, KLControllerSpec, register_kl_controller

    spec = register_kl_controller(
        KLControllerSpec(
            "halving",
            lambda config: HalvingKLController(config.beta),
            moves_beta=True,
            description="beta halves every step",
            ranges=lambda config: {"target_kl": dict(low=0.01)},
            check=lambda config: "beta: the halving controller starts at 1 at most" if config.beta > 1 else None,
            card=lambda training: f"beta halved every step from {training.get('beta')}",
            tag="halving-kl",
        )
    )
    yield spec
    del KL_CONTROLLERS["halving"]


def test_a_registered_kl_controller_is_checked_trained_checkpointed_and_carded(tmp_path, halving_kl):
    from grpo_ext.checkpoints import restore_kl_controller
    from grpo_ext.hub.training import summarize_training
    from tests.trainer_utils import tiny_args, tiny_trainer

    with pytest.raises(UserError, match="the halving controller starts at 1 at most"):
        tiny_args(tmp_path=tmp_path, kl_controller="halving", beta=2.0)
    with pytest.raises(UserError, match=r"target_kl: must be in \[0.01, inf\)"):
        tiny_args(tmp_path=tmp_path, kl_controller="halving", beta=0.1, target_kl=0.001)
    with pytest.raises(UserError, match="`halving` needs beta > 0"):  # it moves beta: the registry's flag
        tiny_args(tmp_path=tmp_path, kl_controller="halving", beta=0.0)

    args = tiny_args(tmp_path=tmp_path, kl_controller="halving", beta=0.1, max_steps=2)
    trainer = tiny_trainer(args=args)
    trainer.train()
    assert [h["beta"] for h in trainer.state.log_history if "beta" in h] == pytest.approx([0.05, 0.025])
    saved = trainer.extension_state()["kl_controller"]
    assert saved == {"type": "halving", "beta": pytest.approx(0.025)}

    resumed, notes = restore_kl_controller(args, saved)
    assert resumed.beta == pytest.approx(0.025)
    assert notes == ["beta: the halving controller goes on from the checkpoint's"]

    summary = summarize_training({"training": args.to_dict()})
    assert "beta halved every step from 0.1" in summary["extensions"] and "halving-kl" in summary["tags"]


# ---- a zero-std strategy --------------------------------------------------------------------------------------------


def keep_first_no_signal_group(trainer, batch, no_signal):
    """Toy: of the groups without signal, the first stays in the loss (its flag cleared); the others are dropped."""
    first = no_signal.nonzero().flatten()[:1]
    no_signal[first] = False
    trainer._metrics["train"]["zero_std/kept_anyway"].append(float(len(first)))
    return batch, no_signal


@pytest.fixture
def keep_first():
    from grpo_ext.batching import ZERO_STD_STRATEGIES, ZeroStdStrategy, register_zero_std_strategy

    spec = register_zero_std_strategy(
        ZeroStdStrategy(
            "keep_first",
            "the first group without signal stays, the others leave the loss",
            drops_groups=True,
            fill=keep_first_no_signal_group,
            check=lambda config: (
                "zero_std_groups: `keep_first` needs num_generations >= 4" if config.num_generations < 4 else None
            ),
            card=lambda training: "zero-std groups: the first kept, the others skipped",
        )
    )
    yield spec
    del ZERO_STD_STRATEGIES["keep_first"]


def test_a_registered_zero_std_strategy_is_parsed_checked_trained_and_carded(tmp_path, keep_first):
    from grpo_ext.batching import ZeroStdStrategy, register_zero_std_strategy
    from grpo_ext.hub.training import summarize_training
    from grpo_ext.script_args import parse_train_args
    from tests.test_trainer import even_answers_constant, group_batch
    from tests.trainer_utils import TRAIN_ARGV, tiny_args, tiny_trainer

    # the command line's choices are the registry's, whenever the entry was registered
    _, parsed, _ = parse_train_args([*TRAIN_ARGV, "--output_dir", str(tmp_path), "--zero_std_groups", "keep_first"])
    assert parsed.zero_std_groups == "keep_first"
    with pytest.raises(UserError, match="zero_std_groups: `keep_first` needs num_generations >= 4"):
        tiny_args(tmp_path=tmp_path, zero_std_groups="keep_first", num_generations=2)
    with pytest.raises(ValueError, match="zero-std strategy 'skip' is already registered"):
        register_zero_std_strategy(ZeroStdStrategy("skip", "not skip", drops_groups=False))

    args = tiny_args(tmp_path=tmp_path, zero_std_groups="keep_first", beta=0.1)
    trainer = tiny_trainer(args=args, reward_funcs=[even_answers_constant])
    trainer.model.train()
    torch.manual_seed(0)
    out = trainer._generate_and_score_completions(group_batch(trainer, [0, 0]))  # two groups, neither with signal
    assert out["zero_std_keep"].tolist() == [1.0] * 4 + [0.0] * 4  # the first kept by the strategy, the second not
    assert out["completion_mask"][4:].sum() == 0 and out["completion_mask"][:4].sum() > 0
    metrics = trainer._metrics["train"]
    assert metrics["zero_std/kept_anyway"] == [1.0] and metrics["zero_std/groups_skipped"] == [1.0]
    assert metrics["zero_std/frac_groups"] == [1.0]
    assert torch.isfinite(trainer._compute_loss(trainer.model, out))

    summary = summarize_training({"training": args.to_dict()})
    assert "zero-std groups: the first kept, the others skipped" in summary["extensions"]


# ---- a task ---------------------------------------------------------------------------------------------------------


def _doubling_task_class():
    """A task as a user writes one, outside the package: double a number (``23+23=`` -> ``46``), in the embedded
    model's characters; its own knob (``high``) and harness defaults."""
    import re

    from datasets import Dataset

    from grpo_ext.tasks import HarnessDefaults, Task

    class DoublingTask(Task):
        name = "doubling"
        harness_defaults = HarnessDefaults(limit=6, max_new_tokens=8)

        def __init__(self, high: int = 49):
            self.high = high

        def load(self, split: str, n: int | None = None) -> Dataset:
            offset = {"train": 0, "validation": 1, "test": 2, "sft": 3}[split]
            numbers = [a for a in range(self.high + 1) if a % 4 == offset][: n or None]
            return Dataset.from_dict(
                {"prompt": [f"{a}+{a}=" for a in numbers], "answer": [str(2 * a) for a in numbers]}
            )

        def extract_answer(self, completion: str) -> str | None:
            numbers = re.findall(r"\d+", completion)
            return numbers[-1] if numbers else None

    return DoublingTask


@pytest.fixture
def doubling_task(monkeypatch):
    from grpo_ext import tasks

    monkeypatch.setattr(tasks, "TASKS", dict(tasks.TASKS))
    return tasks.register_task(_doubling_task_class())


def test_a_registered_task_is_checked_trained_on_and_evaluated(tmp_path, doubling_task):
    import json

    from grpo_ext.evaluation.cli import HarnessArgumentParser, add_harness_arguments, harness_settings
    from grpo_ext.run_record import resolved_config
    from grpo_ext.tasks import Task, get_task, register_task
    from scripts import train
    from tests.trainer_utils import TRAIN_ARGV

    assert get_task("doubling", high=9).load("train")["answer"] == ["0", "8", "16"]
    with pytest.raises(UserError, match="task 'doubling': task_kwargs.high must be an integer, got '9'"):
        get_task("doubling", high="9")  # its constructor's annotation, checked by the registry
    assert register_task(doubling_task) is doubling_task  # the same class again (a reloaded module): accepted
    with pytest.raises(ValueError, match="task 'doubling' is already registered"):
        register_task(type("Tripling", (doubling_task,), {}))  # another class under the same name
    with pytest.raises(TypeError, match="has no `name`"):
        register_task(type("Nameless", (doubling_task,), {"name": ""}))
    with pytest.raises(TypeError, match="expected a Task subclass"):
        register_task(dict)
    assert issubclass(doubling_task, Task)

    settings = harness_settings(
        add_harness_arguments(HarnessArgumentParser(prog="x")).parse_args(["--task", "doubling", "--n", "2"])
    )
    assert settings.task_id == "doubling/test" and settings.limit == 6 and settings.params.max_new_tokens == 8

    out = tmp_path / "run"
    flags = ["--task", "doubling", "--task_kwargs", '{"high": 99}', "--train_size", "16"]
    train.main([*TRAIN_ARGV, *flags, "--max_steps", "1", "--output_dir", str(out)])
    assert json.loads((out / "grpo_ext_run.json").read_text())["status"] == "complete"
    assert resolved_config(out)["task"]["task"] == "doubling"
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    assert any("rewards/outcome_reward/mean" in h for h in history)  # the task's own verifier scored the samples


# ---- a PRM format ---------------------------------------------------------------------------------------------------


class LengthPRM:
    """Toy PRM: a step scores its length over `scale` characters (at most 1); no weights read."""

    def __init__(self, folder, step_separator: str = "\n", scale: float = 10.0, **placement):
        self.step_separator, self.scale, self.__name__ = step_separator, scale, "prm_length"

    def __call__(self, prompts, completions, **kwargs):
        from grpo_ext.reasoning_steps import step_texts
        from grpo_ext.tasks.base import completion_text

        return [
            [min(len(step) / self.scale, 1.0) for step in step_texts(completion_text(c), self.step_separator)]
            for c in completions
        ]


@pytest.fixture
def length_prm(tmp_path):
    """The toy format registered, and a folder in it (config.json naming its architecture, safetensors weights)."""
    import json

    import torch
    from safetensors.torch import save_file

    from grpo_ext.rewards.prm import PRM_FORMATS, PRMFormat, register_prm_format

    register_prm_format(
        PRMFormat("length", lambda config: config.get("architectures") == ["LengthPRM"], ("scale",), LengthPRM)
    )
    folder = tmp_path / "length-prm"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"architectures": ["LengthPRM"]}))
    save_file({"unused": torch.zeros(1)}, str(folder / "model.safetensors"))
    yield folder
    del PRM_FORMATS["length"]


def test_a_registered_prm_format_is_detected_checked_and_trained_with(tmp_path, length_prm):
    from grpo_ext.config import GRPOExtConfig
    from grpo_ext.rewards.prm import detect_prm_format, load_process_reward_model
    from tests.trainer_utils import tiny_args, tiny_trainer

    assert detect_prm_format(length_prm) == "length"
    prm = load_process_reward_model(length_prm, step_separator=";", scale=4.0)  # its own option, detected format
    assert prm(prompts=["p"], completions=["ab;abcdefgh"]) == [[0.5, 1.0]]
    with pytest.raises(TypeError, match="format 'length' takes no good_token"):
        load_process_reward_model(length_prm, "length", good_token="+")
    with pytest.raises(UserError, match="process_reward_model_step_tag: only the `step_tag` format reads it"):
        GRPOExtConfig(
            output_dir=str(tmp_path),
            use_cpu=True,
            report_to="none",
            process_reward_model=str(length_prm),
            process_reward_model_format="length",
            process_reward_model_step_tag="t",
        )

    args = tiny_args(
        tmp_path=tmp_path / "run",
        max_steps=1,
        advantage_mode="process",
        process_reward_model=str(length_prm),
        process_reward_model_format="length",
    )
    trainer = tiny_trainer(args=args)
    assert trainer.process_reward_funcs[0].__name__ == "prm_length"
    trainer.train()
    logged = next(h for h in trainer.state.log_history if "process/step_reward_mean" in h)
    assert 0.0 < logged["process/step_reward_mean"] <= 1.0


# ---- a method of the paradigm ---------------------------------------------------------------------------------------

TOY_METHOD_CONFIG = """\
method: toy_sft
task: arithmetic
train_size: 8
model_name_or_path: embedded
use_cpu: true
bf16: false
max_steps: 1
per_device_train_batch_size: 8
max_length: 64
save_strategy: "no"
report_to: none
disable_tqdm: true
sample_budget: 0
"""


def build_toy_sft(ctx):
    """Toy: the SFT trainer, saying in the run's details that it was this builder."""
    from grpo_ext.methods.trainers import build_sft

    ctx.details["built_by"] = "toy"
    return build_sft(ctx)


@pytest.fixture
def toy_method(monkeypatch):
    from grpo_ext.methods import paradigm
    from grpo_ext.methods.trainers import sft_config

    monkeypatch.setattr(paradigm, "METHODS", dict(paradigm.METHODS))
    return paradigm.register_method(
        paradigm.Method(
            "toy_sft",
            "Toy SFT",
            "q, o ~ P_sft(Q, O)",
            "-",
            "1",
            online=False,
            advantage_mode=None,
            trainer="trl.SFTTrainer",
            runner="toy",
            build=build_toy_sft,
            config_class=sft_config,
            loss_types=("nll",),  # its trainer's, checked with its config: here fewer than TRL's SFT takes
            quick_flags="--per_device_train_batch_size 2",
        )
    )


def test_a_registered_method_is_parsed_trained_recorded_and_tabled(tmp_path, toy_method):
    import json

    from trl import SFTConfig

    from grpo_ext.methods import paradigm_markdown, run_method
    from grpo_ext.methods.config import parse_method_args

    config = tmp_path / "toy_sft.yaml"
    config.write_text(TOY_METHOD_CONFIG)
    assert isinstance(parse_method_args(["--config", str(config)])[2], SFTConfig)  # its config class
    with pytest.raises(UserError, match="loss_type: unknown value 'dft'; expected one of nll"):
        parse_method_args(["--config", str(config), "--loss_type", "dft"])
    assert not toy_method.draws_samples  # offline, on reference solutions: no sampling budget
    cost = run_method(["--config", str(config), "--output_dir", str(tmp_path / "run")])
    assert cost["method"] == "toy_sft" and cost["optimizer_steps"] == 1 and cost["details"]["built_by"] == "toy"
    record = json.loads((tmp_path / "run" / "method_run.json").read_text())
    assert record["method"]["runner"] == "toy" and "build" not in record["method"]
    assert "| Toy SFT | q, o ~ P_sft(Q, O) | - | 1 |" in paradigm_markdown()

    from tests.experiments.study.test_study_driver import fresh_driver

    # the study's --quick flags (scripts/run_methods.py) come from the entry
    assert fresh_driver().quick_method_flags(rehearsal=False)["toy"] == "--per_device_train_batch_size 2"


# ---- a harness metric -----------------------------------------------------------------------------------------------


def _fail_at_k(n, records, key):
    """Toy: P(all k samples are wrong) = 1 - pass@k, per problem."""
    import numpy as np

    from grpo_ext.evaluation.metrics import pass_at_k_many

    return 1.0 - pass_at_k_many(n, np.array([r["n_correct"] for r in records]), int(key))


@pytest.fixture
def fail_metric():
    from grpo_ext.evaluation.registry import METRICS, Metric, register_metric

    yield register_metric(Metric("fail@k", "k", _fail_at_k, "fail@k"))
    del METRICS["fail@k"]


def test_a_registered_metric_is_scored_reported_read_and_paired(tmp_path, fail_metric):
    import json

    from grpo_ext.evaluation.analysis import BootstrapSettings
    from grpo_ext.evaluation.report import write_reports
    from grpo_ext.evaluation.results import EvalResult
    from grpo_ext.experiments.study.stats import per_problem
    from tests.harness_results import harness_result
    from tests.trainer_utils import TASK

    problems = list(TASK.load("test", 3))
    right = [p["solution"] for p in problems]
    completions = [[right[0]] * 4, [right[1], "x", "x", "x"], ["x"] * 4]  # 4, 1 and 0 right samples of 4
    result = harness_result("toy", TASK, problems, completions, ks=[1, 2, 4])
    assert result["fail@k"] == pytest.approx({"1": (0 + 0.75 + 1) / 3, "2": (0 + 0.5 + 1) / 3, "4": 1 / 3})
    assert EvalResult.of(result).value("fail@2") == pytest.approx(0.5)
    assert per_problem(result, "fail@4").tolist() == pytest.approx([0.0, 0.0, 1.0])

    paths = write_reports([result], tmp_path, bootstrap=BootstrapSettings(n_resamples=200))
    assert "| k | pass@k | maj@k | pass^k | fail@k |" in paths["md"].read_text()  # its column, with intervals
    (model,) = json.loads(paths["json"].read_text())["models"]
    assert set(model["intervals"]["fail@k"]) == {"1", "2", "4"}
