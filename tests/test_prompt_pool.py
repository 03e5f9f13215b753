"""The prompts a run draws: how many (against TRL's own sampler), refill's from the task's prompts after the run's
(none twice), and every RL prompt outside the base model's SFT set."""

import itertools

import pytest
from trl.trainer.utils import RepeatSampler

from grpo_ext.assembly import build_grpo_trainer
from grpo_ext.batching import RefillPrompts, prompts_drawn, refill_reserve
from grpo_ext.model_paths import EMBEDDED_MODEL_DIR
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
    from grpo_ext.script_args import parse_train_args

    task_args, training_args, _ = parse_train_args(["--config", str(root / "configs" / name)])
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


def test_a_study_refill_arm_draws_its_refill_prompts_after_its_own(root, tmp_path):
    """The study's online runner (`build_online`, what outcome_refill and process_refill train with) gets the same
    reserve as `build_grpo_trainer(train_size=...)`: refill rounds never draw one of the arm's 6 prompts."""
    from grpo_ext.methods.config import parse_method_args
    from grpo_ext.methods.paradigm import get_method
    from grpo_ext.methods.trainers import RunContext

    flags = ["--zero_std_groups", "refill", "--max_refill_rounds", "2", "--train_size", "6", "--max_steps", "3"]
    flags += ["--per_device_train_batch_size", "8", "--num_generations", "4", "--output_dir", str(tmp_path)]
    flags += ["--model_name_or_path", str(EMBEDDED_MODEL_DIR), "--use_cpu", "true", "--report_to", "none"]
    method_args, task_args, training_args, model_args = parse_method_args(
        ["--config", str(root / "configs" / "methods" / "grpo_outcome.yaml"), *flags]
    )
    task = TASK.__class__(**task_args.task_kwargs)
    run = task.load("train", 6)
    ctx = RunContext(get_method("grpo_outcome"), method_args, task_args, training_args, model_args, task, run)
    trainer = ctx.method.build(ctx)
    assert trainer.train_dataset["prompt"] == run["prompt"]
    assert trainer._refill.dataset["prompt"] == task.load("train", 18)["prompt"][6:]  # 3 batches x 2 rounds x 2


def test_refill_on_a_split_with_nothing_after_the_run_draws_the_runs_prompts_and_says_so(tmp_path, caplog):
    from datasets import Dataset

    class Small:  # a dataset of fixed size (GSM8K's way): load returns at most its 5 rows
        name = "small"
        rows = TASK.load("train", 5)

        def load(self, split, n=None):
            return self.rows.select(range(min(n or 5, 5)))

    args = tiny_args(tmp_path=tmp_path, zero_std_groups="refill", max_refill_rounds=2, max_steps=3)
    with caplog.at_level("WARNING", logger="grpo_ext.batching"):
        assert refill_reserve(Small(), 5, args) is None
    assert "holds 0 prompts after the run's 5" in caplog.text and "draws the run's own prompts again" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="grpo_ext.batching"):
        short = refill_reserve(Small(), 3, args)  # 2 rows left where 12 could be drawn: used, with a warning
    assert short["prompt"] == Small.rows["prompt"][3:] and "they repeat once it is used up" in caplog.text
    assert isinstance(short, Dataset)
