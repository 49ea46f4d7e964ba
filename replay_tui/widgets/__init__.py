"""widgets of the replay TUI."""
