"""Entry-point plumbing: bad input ends a CLI with one readable line (the traceback only with --debug).

One line and exit code 2 for what the user can fix: a `UserError` (raised where input is validated), an `OSError`
(a missing or unreadable file, a read-only or full disk) and a torn weights file (`SafetensorError`). Everything
else is a bug of ours and keeps its traceback: a stray `KeyError` or `TypeError` is not dressed up as bad input.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from grpo_ext.errors import UserError

__all__ = ["one_line", "run_cli"]


def _is_user_side(err: BaseException) -> bool:
    return isinstance(err, (UserError, OSError)) or type(err).__name__ == "SafetensorError"


def one_line(err: BaseException) -> str:
    """The message `run_cli` prints: the first line of the error, with the file an `OSError` names."""
    if isinstance(err, OSError) and err.filename is not None:
        reason = err.strerror or type(err).__name__
        message = f"{err.filename}: {reason}"
    else:
        message = str(err).strip().splitlines()[0] if str(err).strip() else ""
        if not isinstance(err, UserError):  # an OSError without a file, a SafetensorError: say which kind
            message = f"{type(err).__name__}: {message}" if message else type(err).__name__
    return message or type(err).__name__


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
