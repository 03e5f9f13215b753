"""Entry-point plumbing: bad input ends a CLI with one readable line (the traceback only with --debug)."""

from __future__ import annotations

import sys
from collections.abc import Callable

# Errors that mean "the user's input is wrong", not "the program is broken".
USER_ERRORS = (ValueError, FileNotFoundError, KeyError, TypeError)


def run_cli(main: Callable[[list[str]], object], argv: list[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    if debug:
        argv.remove("--debug")
        main(argv)
        return
    try:
        main(argv)
    except USER_ERRORS as err:
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        print(f"error: {message} (rerun with --debug for the traceback)", file=sys.stderr)
        sys.exit(2)
