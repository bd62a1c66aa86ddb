"""``python3 dev.py check-history FILE --model MODEL``: exit 0 when every key is linearizable,
1 with the windows no legal order explains, 2 for a file or model it cannot read."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from faults.history import check_file
from faults.history.events import Malformed

MODEL_HELP = "mutex, fenced-register, semaphore:N, rwlock or leader"


def main(argv: Sequence[str]) -> int:
    """Check a history file; the exit status."""
    parser = argparse.ArgumentParser(
        prog="dev.py check-history", description="Check a history for linearizability."
    )
    parser.add_argument("file", help="the history: JSON Lines (faults/recorder.py)")
    parser.add_argument("--model", required=True, help=MODEL_HELP)
    options = parser.parse_args(argv)
    try:
        verdict = check_file(options.file, options.model)
    except Malformed as exc:
        print(f"malformed history {options.file}, {exc}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as exc:
        print(f"check-history: {exc}", file=sys.stderr)
        return 2
    for line in verdict.lines():
        print(line)
    return 0 if verdict.linearizable else 1
