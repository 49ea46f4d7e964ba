"""Example agents that run on beam-agents (importable from the repository root).

``examples.support_desk`` is the order-support agent that ``make demo`` runs.
"""
