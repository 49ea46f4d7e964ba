"""``beam-agents-replay tui``: the operator's incident view over a ``ReplayResult``.

Importing this package imports nothing heavy; ``replay_tui.app.run_tui`` (and
Textual with it) is imported only when the ``tui`` subcommand runs.
"""
