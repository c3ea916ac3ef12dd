"""Progress bars that read well both in a terminal and in a log file."""

from __future__ import annotations

import sys
from typing import Any

#: Seconds between refreshes when stderr is not a terminal (CI logs, ``| tee``): a line every
#: so often instead of thousands of carriage-return updates.
LOG_INTERVAL_S = 15.0


def progress_bar(**kwargs: Any) -> Any:
    """A ``tqdm`` bar; outside a terminal it refreshes only every ``LOG_INTERVAL_S`` seconds."""
    from tqdm.auto import tqdm

    if not sys.stderr.isatty():
        kwargs.setdefault("mininterval", LOG_INTERVAL_S)
    return tqdm(dynamic_ncols=True, **kwargs)
