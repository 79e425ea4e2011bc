"""The answer of one tool call (``POST /api/tools/call``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ._model import Model


@dataclass(kw_only=True)
class ToolResult(Model):
    """What a tool answered: ``content`` for the model (text), ``structured`` for programs (the
    JSON result), ``is_error`` when the tool refused or failed (the model should read why)."""

    content: Any = None
    structured: Any = None
    is_error: bool = False
