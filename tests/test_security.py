"""Remote code stays off unless asked; training loads weights from safetensors only."""

from trl import ModelConfig

from grpo_ext.config import GRPOExtConfig
from grpo_ext.modeling import policy_init


def test_policy_init_defaults_to_safetensors_and_no_remote_code(tmp_path):
    args = GRPOExtConfig(output_dir=str(tmp_path), use_cpu=True, per_device_train_batch_size=8, num_generations=4)
    model_args = ModelConfig(model_name_or_path="embedded")
    policy_init(model_args, args)
    assert args.model_init_kwargs["use_safetensors"] is True
    assert args.model_init_kwargs["trust_remote_code"] is False
