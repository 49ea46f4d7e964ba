"""The package version, kept apart so the replay CLI can print it without importing anything else."""

__version__ = "1.0.0a1"
