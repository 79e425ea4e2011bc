"""Python client of mnemo, the memory service for LLM agents.

``Mnemo`` blocks, ``AsyncMnemo`` awaits; both have the same resources (``memories``, ``notes``,
``chat``, ``tasks``, ``account``, ``tools``) and ``recall``. Every failure raises ``MnemoError``.
"""

from . import models
from ._async import AsyncMnemo
from ._errors import MnemoError
from ._sync import Mnemo
from ._tool_result import ToolResult
from ._transport import RetryPolicy, TokenSource

__all__ = [
    "AsyncMnemo",
    "Mnemo",
    "MnemoError",
    "RetryPolicy",
    "TokenSource",
    "ToolResult",
    "models",
]
__version__ = "0.1.0"
