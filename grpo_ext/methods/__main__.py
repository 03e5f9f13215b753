"""python -m grpo_ext.methods --config configs/methods/<name>.yaml [--flag value ...]: train one method."""

from grpo_ext.cli import run_cli
from grpo_ext.methods import run_method

if __name__ == "__main__":
    run_cli(run_method)
