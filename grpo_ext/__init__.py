"""grpo-ext: DeepSeekMath's GRPO extensions on top of Hugging Face TRL, and an evaluation harness."""

__version__ = "0.1.0"
