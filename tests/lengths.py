"""How long the longest tests run: a shortened form in the default run (the whole suite stays
within its time on a 2-core machine), the whole form with ``KSP_LONG_TESTS=1`` in the
environment (`scripts/test` passes it on): what a release or a change to the code such a test
covers runs."""
from __future__ import annotations

import os

LONG = os.environ.get("KSP_LONG_TESTS", "") not in ("", "0")


def examples(default: int, long: int) -> int:
    """Hypothesis examples of a property test whose examples each start a server."""
    return long if LONG else default
