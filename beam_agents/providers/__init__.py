"""Model providers for real models, each behind an optional extra.

    from beam_agents.providers import OpenAIChatProvider        # pip install 'beam-agents[openai]'
    from beam_agents.providers import AnthropicMessagesProvider # pip install 'beam-agents[anthropic]'

Both are built on the vendor's official SDK, which is imported only when the class is
first used: ``import beam_agents.providers`` works without either SDK installed, and a
missing SDK is an ``ImportError`` naming the extra to install. See docs/providers.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from beam_agents.providers.anthropic_messages import AnthropicMessagesProvider
    from beam_agents.providers.openai_chat import OpenAIChatProvider

__all__ = ["AnthropicMessagesProvider", "OpenAIChatProvider"]

_LAZY = {
    "OpenAIChatProvider": ("beam_agents.providers.openai_chat", "openai"),
    "AnthropicMessagesProvider": ("beam_agents.providers.anthropic_messages", "anthropic"),
}


def __getattr__(name: str) -> Any:
    found = _LAZY.get(name)
    if found is None:
        raise AttributeError(f"module 'beam_agents.providers' has no attribute {name!r}")
    module, extra = found
    try:
        value = getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        if exc.name != extra:
            raise
        raise ImportError(
            f"{name} needs the {extra!r} package, which is not installed: "
            f"pip install 'beam-agents[{extra}]'"
        ) from exc
    globals()[name] = value
    return value
