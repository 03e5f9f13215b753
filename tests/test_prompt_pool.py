"""The prompts a run draws: how many (against TRL's own sampler), refill's from the task's prompts after the run's
(none twice), and every RL prompt outside the base model's SFT set."""

import itertools

import pytest
from trl.trainer.utils import RepeatSampler

from grpo_ext.assembly import build_grpo_trainer
from grpo_ext.batching import RefillPrompts, prompts_drawn
from grpo_ext.models import EMBEDDED_MODEL_DIR
from tests.trainer_utils import TASK, tiny_args


@pytest.mark.parametrize(
    "overrides",
    [
        dict(max_steps=5, per_device_train_batch_size=8, num_generations=4),  # 2 prompts a step: 10
        dict(max_steps=5, per_device_train_batch_size=8, num_generations=4, num_iterations=2),  # reused: 6 (3 x 2)
        dict(max_steps=3, per_device_train_batch_size=8, num_generations=4, gradient_accumulation_steps=2),  # 12
        dict(max_steps=4, per_device_train_batch_size=4, num_generations=4, steps_per_generation=4),  # 4 a batch
    ],
)
def test_prompts_drawn_is_what_trls_sampler_hands_out(tmp_path, overrides):
    """Brute force: the distinct indices TRL's RepeatSampler yields over the run's micro-batches (each one reads
    per_device_train_batch_size x steps_per_generation indices, as GRPOTrainer's dataloader does)."""
    args = tiny_args(tmp_path=tmp_path, **overrides)
    sampler = RepeatSampler(
        data_source=range(10_000),
        mini_repeat_count=args.num_generations,
        batch_size=args.generation_batch_size // args.num_generations,
        repeat_count=args.num_iterations * args.steps_per_generation,
        shuffle=True,
        seed=0,
    )
    micro_batches = args.max_steps * args.gradient_accumulation_steps
    read = micro_batches * args.per_device_train_batch_size * args.steps_per_generation
    assert prompts_drawn(args) == len(set(itertools.islice(iter(sampler), read)))


def test_a_run_sized_in_epochs_draws_an_unknown_number(tmp_path):
    assert prompts_drawn(tiny_args(tmp_path=tmp_path, max_steps=-1, num_train_epochs=1)) is None


def test_refill_reads_every_row_once_before_any_twice_and_a_resume_reads_the_same():
    data = TASK.load("train", 10)
    refill = RefillPrompts(data, seed=3)
    draws = [[row["prompt"] for row in refill.next_prompts(3)] for _ in range(6)]  # 18 reads of 10 rows
    first_epoch = [p for draw in draws for p in draw][:10]
    assert sorted(first_epoch) == sorted(data["prompt"])  # a permutation: each row once
    assert first_epoch != data["prompt"]  # in a seeded random order, not the dataset's
    resumed = RefillPrompts(data, seed=3)
    resumed.draws = 4  # a checkpoint keeps the draw count
    assert [row["prompt"] for row in resumed.next_prompts(3)] == draws[4]


def test_refill_rounds_draw_prompts_the_run_never_reads(tmp_path):
    """The run's prompts are what an arm without refill gets (the first train_size); refill's come after them, as
    many as every round of every generation batch could draw (3 batches x 2 rounds x 2 prompts), none twice."""
    args = tiny_args(tmp_path=tmp_path, zero_std_groups="refill", max_refill_rounds=2, max_steps=3)
    trainer = build_grpo_trainer(TASK, args, model=str(EMBEDDED_MODEL_DIR), train_size=6)
    assert trainer.train_dataset["prompt"] == TASK.load("train", 6)["prompt"]
    assert trainer._refill.dataset["prompt"] == TASK.load("train", 18)["prompt"][6:]
    reserve = [row["prompt"] for _ in range(6) for row in trainer._refill.next_prompts(2)]
    assert sorted(reserve) == sorted(trainer._refill.dataset["prompt"])  # every refill prompt once


def test_a_dataset_smaller_than_the_run_is_warned_about(tmp_path, caplog):
    args = tiny_args(tmp_path=tmp_path, max_steps=3)  # draws 6 prompts
    with caplog.at_level("WARNING", logger="grpo_ext.assembly"):
        build_grpo_trainer(TASK, args, model=str(EMBEDDED_MODEL_DIR), train_size=4)
    assert "draws 6 prompts but the dataset holds 4" in caplog.text


def test_rl_prompts_are_never_the_base_models_sft_problems():
    """The base is supervised on split `sft` (scripts/build_base_model.py); every RL run loads split `train`."""
    sft = set(TASK.load("sft", 3000)["prompt"])
    assert sft.isdisjoint(TASK.load("train", 3000)["prompt"])


TOP_LEVEL_CONFIGS = ["default.yaml", "qlora.yaml", "process.yaml", "refill.yaml", "adaptive_kl.yaml"]


@pytest.mark.parametrize("name", TOP_LEVEL_CONFIGS)
def test_no_shipped_run_trains_on_a_prompt_twice(root, name):
    """The main job and the extension configs draw no more prompts than they load (the task's default 20,000 when
    train_size is unset)."""
    from scripts.train import parse_args

    task_args, training_args, _ = parse_args(["--config", str(root / "configs" / name)])
    available = task_args.train_size or len(TASK.load("train"))
    assert prompts_drawn(training_args) <= available


def test_every_online_arm_of_the_study_reads_its_prompts_once_and_the_offline_arms_sample_the_same(root):
    from grpo_ext.methods.config import parse_method_args
    from grpo_ext.methods.paradigm import get_method

    sizes = {}
    for path in sorted((root / "configs" / "methods").glob("*.yaml")):
        method_args, task_args, training_args, _ = parse_method_args(["--config", str(path)])
        sizes[path.stem] = task_args.train_size
        if get_method(path.stem).online:
            assert prompts_drawn(training_args) == task_args.train_size, path.name  # every prompt once
    assert len(set(sizes.values())) == 1, sizes  # RFT and DPO sample the online arms' prompt set
