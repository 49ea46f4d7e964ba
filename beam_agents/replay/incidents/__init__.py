"""Floor 6: commands over many activations (ls, bundles, check)."""
