"""Open the TUI on one of the hand-built results, to look at it in a real terminal.

    .venv/bin/python tests/replay_tui/open_fixture.py diverged      # or reproduced, cache-miss, ...
    .venv/bin/python tests/replay_tui/open_fixture.py large 100000

Exits with the code the app returns on ``q`` (the verdict's).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tui_results

from replay_tui.app import ReplayApp


def main(argv: list[str]) -> int:
    name = argv[0] if argv else "diverged"
    if name == "large":
        result = tui_results.large_result(int(argv[1]) if len(argv) > 1 else 100_000)
    else:
        result = tui_results.RESULTS[name]()
    app = ReplayApp(result)
    app.run()
    return app.exit_code if app.exit_code is not None else 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
