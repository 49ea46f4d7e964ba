"""Floor 3: the re-run compared with the trace, and the verdict."""
