"""Floor 1: a ``ReplayResult`` rendered (headless text, JSON, Markdown, redacted); nothing decided."""
