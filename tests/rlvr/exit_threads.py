"""``python exit_threads.py OUT_DIR train CONFIG ...``: ``rlvr train``, then the threads at exit.

Runs ``rlvr.cli.main`` with the remaining arguments; when the interpreter starts its teardown
(``atexit``), each rank writes ``OUT_DIR/rank{RANK}.json``: the names of the process's native
threads (``/proc/self/task/*/comm``). gloo's worker and I/O threads are ``pt_gloo_runloop`` and
``gloo_tcp_loop``; one still alive there means the process group outlived ``rlvr train`` and
would be destroyed inside the teardown, where a rank can abort (see
``rlvr.learner.parallel.close_distributed``).
"""

from __future__ import annotations

import atexit
import json
import os
import sys
from pathlib import Path


def native_threads() -> list[str]:
    """The names of this process's threads (Linux)."""
    names = []
    for tid in sorted(os.listdir("/proc/self/task")):
        try:
            names.append(Path(f"/proc/self/task/{tid}/comm").read_text().strip())
        except OSError:  # the thread ended meanwhile
            pass
    return names


def main() -> None:
    out = Path(sys.argv[1])

    def report() -> None:
        rank = os.environ.get("RANK", "0")
        (out / f"rank{rank}.json").write_text(json.dumps(native_threads()))

    atexit.register(report)
    from rlvr.cli import main as rlvr_main

    sys.exit(rlvr_main(sys.argv[2:]))


if __name__ == "__main__":
    main()
