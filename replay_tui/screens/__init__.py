"""screens of the replay TUI."""
