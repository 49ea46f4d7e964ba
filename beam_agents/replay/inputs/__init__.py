"""Floor 1: replay's inputs, read and checked (every failure a refusal naming the input)."""
