"""Floor 2: the activation to re-run, and the key's state just before it."""
