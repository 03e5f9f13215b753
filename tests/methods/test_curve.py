"""A learning curve is drawn for every run, searched settings that are not picked included: it scores validation
prompts, never test ones."""

from __future__ import annotations

from types import SimpleNamespace


def test_learning_curve_scores_validation_prompts_only():
    from grpo_ext.methods.curve import add_learning_curve
    from grpo_ext.tasks import get_task
    from grpo_ext.tasks.arithmetic import split_of

    added = []
    trainer = SimpleNamespace(add_callback=added.append)
    method_args = SimpleNamespace(
        curve_every=1, curve_prompts=5, curve_n=2, curve_temperature=0.7, sample_max_new_tokens=8, sample_batch_size=4
    )
    training_args = SimpleNamespace(per_device_train_batch_size=8, gradient_accumulation_steps=1)
    curve = add_learning_curve(trainer, get_task("arithmetic"), "grpo_outcome", method_args, training_args)
    assert added == [curve] and len(curve.problems) == 5
    assert {split_of(p["prompt"]) for p in curve.problems} == {"validation"}


def test_learning_curve_cuts_samples_at_the_tasks_stop_strings():
    """The curve samples as the study's evaluations do: a sample ends at the task's stop string (``Question:``), so a
    model that answers and writes a new question is scored, and timed, on its answer alone."""
    from grpo_ext.methods.curve import add_learning_curve
    from grpo_ext.tasks import get_task

    task = get_task("word_arithmetic")
    assert task.stop_strings  # else this test checks nothing
    method_args = SimpleNamespace(
        curve_every=1, curve_prompts=2, curve_n=2, curve_temperature=0.7, sample_max_new_tokens=8, sample_batch_size=4
    )
    training_args = SimpleNamespace(per_device_train_batch_size=8, gradient_accumulation_steps=1)
    trainer = SimpleNamespace(add_callback=lambda callback: None)
    curve = add_learning_curve(trainer, task, "grpo_outcome", method_args, training_args)
    assert curve.params.stop == tuple(task.stop_strings)
