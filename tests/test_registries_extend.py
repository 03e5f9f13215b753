"""Each registry is the only file a new entry touches: a toy KL controller, PRM format, method and metric, each
registered here, work end to end (config check, training or scoring, checkpoint, model card or report) without an
edit anywhere else in the package (issue 39, deliverable 1)."""

from __future__ import annotations

import pytest

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
    cost = run_method(["--config", str(config), "--output_dir", str(tmp_path / "run")])
    assert cost["method"] == "toy_sft" and cost["optimizer_steps"] == 1 and cost["details"]["built_by"] == "toy"
    record = json.loads((tmp_path / "run" / "method_run.json").read_text())
    assert record["method"]["runner"] == "toy" and "build" not in record["method"]
    assert "| Toy SFT | q, o ~ P_sft(Q, O) | - | 1 |" in paradigm_markdown()

    from tests.methods.study.test_study_driver import fresh_driver

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
    from grpo_ext.methods.study.stats import per_problem
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
