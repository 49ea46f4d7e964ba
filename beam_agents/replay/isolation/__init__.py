"""Floor 2: what keeps agent code contained while it re-runs (guard, time limit, watchdog)."""
