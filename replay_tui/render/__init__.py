"""render of the replay TUI."""
