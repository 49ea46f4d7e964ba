"""``python -m beam_agents.cli``: the same as the ``beam-agents-replay`` console script."""

from __future__ import annotations

import sys

from beam_agents.cli import main

sys.exit(main())
