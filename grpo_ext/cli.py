"""Entry-point plumbing: bad input ends a CLI with one readable line (the traceback only with --debug).

One line and exit code 2 for what the user can fix: a `UserError` (raised where input is validated), an `OSError`
(a missing or unreadable file, a read-only or full disk) and a torn weights file (`SafetensorError`). Everything
else is a bug of ours and keeps its traceback: a stray `KeyError` or `TypeError` is not dressed up as bad input.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Sequence

from grpo_ext.errors import UserError, one_line, read_yaml, user_file, user_input

__all__ = ["parse_trl_config", "run_cli"]


def _is_user_side(err: BaseException) -> bool:
    return isinstance(err, (UserError, OSError)) or type(err).__name__ == "SafetensorError"


def run_cli(main: Callable[[list[str]], object], argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    if debug:
        argv.remove("--debug")
        main(argv)
        return
    try:
        main(argv)
    except Exception as err:
        if not _is_user_side(err):
            raise
        print(f"error: {one_line(err)} (rerun with --debug for the traceback)", file=sys.stderr)
        sys.exit(2)


# List fields whose library takes one string too (PEFT's `all-linear`, DPO's `sigmoid`, transformers' debug options).
_SCALAR_TAKEN = ("lora_target_modules", "loss_type", "debug")


def parse_trl_config(dataclass_types: Sequence[type], argv: list[str]) -> tuple:
    """`trl.TrlParser(dataclass_types).parse_args_and_config(argv)`, where everything the user can get wrong is a
    `UserError`: a flag argparse rejects (one line, not the usage text), an abbreviated flag (argparse would take
    `--learning_rat` for `--learning_rate`), a `--config` file that cannot be read or parsed or that repeats a key, a
    single value where the field takes a list (it would be split into characters), a value a dataclass's
    `__post_init__` rejects (TRL's checks and ours), and a training config's numbers out of range
    (`grpo_ext.validation.check_training_ranges`, for each parsed `TrainingArguments`)."""
    from transformers import TrainingArguments
    from trl import TrlParser

    from grpo_ext.validation import check_training_ranges

    config = next((argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--config"), None)

    class Parser(TrlParser):
        def error(self, message):  # argparse would print the usage and exit
            raise UserError(message)

        def set_defaults_with_config(self, **values):
            for action in self._actions:
                value = values.get(action.dest)
                listed = action.nargs in ("+", "*") and action.dest not in _SCALAR_TAKEN
                if listed and value is not None and not isinstance(value, list):
                    raise UserError(
                        f"{action.dest}: {config} gives the single value {value!r} where a list is expected "
                        f"(write {action.dest}: [{value}])"
                    )
                # argparse converts a string default ("no" -> False) but keeps any other as it is: 3 or [] would be
                # taken as true
                boolean = getattr(action.type, "__name__", None) == "string_to_bool"  # HfArgumentParser's (TRL's copy)
                if boolean and value is not None and not isinstance(value, (bool, str)):
                    raise UserError(f"{action.dest}: {config} gives {value!r} where true or false is expected")
            return super().set_defaults_with_config(**values)

    parser = Parser(list(dataclass_types), allow_abbrev=False)
    if config:
        read_yaml(config, "--config")  # a repeated key or a parse error, named; TRL then reads the same file
    with user_file(config, "--config") if config else contextlib.nullcontext(), user_input(None):
        parsed = parser.parse_args_and_config(argv)
    for args in parsed:
        if isinstance(args, TrainingArguments):
            check_training_ranges(args)
    return tuple(parsed)
