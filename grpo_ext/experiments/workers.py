"""Worker processes that end with the experiment that started them.

A study or an iterative experiment runs its jobs in a process pool. Killed with SIGTERM (a scheduler's stop, ``kill``,
a session's end), the experiment's process dies at once and its pool's workers, mid-run, do not: they keep training
into the folders that a restarted experiment then writes too. Each worker watches the experiment's process and exits
when it is gone. It watches that process by its pid, not its own parent: under ``forkserver`` the parent is the fork
server, which outlives the experiment as long as any worker does (every worker holds the server's ``alive`` pipe).
"""

from __future__ import annotations

import os
import threading
import time

__all__ = ["end_with", "running"]


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and has not ended (a zombie, ended but not yet reaped, has)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][:1] != "Z"
    except (FileNotFoundError, IndexError):  # no /proc (macOS): os.kill's answer
        return True


def end_with(pid: int, poll_seconds: float = 1.0) -> None:
    """A pool worker's initializer: exit (status 1, no cleanup: a job's outputs are written atomically, a half-done
    run is redone) once process ``pid``, the experiment's, has ended. Pass ``initargs=(os.getpid(),)``."""

    def watch():
        while running(pid):
            time.sleep(poll_seconds)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="end-with-experiment").start()
