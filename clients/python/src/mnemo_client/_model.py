"""The base of every model: construction from the service's JSON, and back."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

M = TypeVar("M", bound="Model")


@dataclass(kw_only=True)
class Model:
    """A JSON object of the API as a dataclass; members this version does not know stay in
    ``extra``."""

    extra: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    _nested: ClassVar[dict[str, tuple[str, bool]]] = {}
    _wire: ClassVar[dict[str, str]] = {}

    @classmethod
    def from_dict(cls: type[M], data: dict[str, Any]) -> M:
        models = sys.modules[cls.__module__]
        known = {f.name for f in dataclasses.fields(cls) if f.name != "extra"}
        to_attr = {wire: attr for attr, wire in cls._wire.items()}
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in data.items():
            attr = to_attr.get(key, key)
            if attr not in known or key in cls._wire:
                extra[key] = value
                continue
            nested = cls._nested.get(attr)
            if nested is not None and value is not None:
                model = getattr(models, nested[0])
                if nested[1]:
                    value = [model.from_dict(v) if isinstance(v, dict) else v for v in value]
                elif isinstance(value, dict):
                    value = model.from_dict(value)
            kwargs[attr] = value
        for f in dataclasses.fields(cls):
            # A member the document calls required but this answer lacks: None, not a crash.
            if (
                f.name not in kwargs
                and f.name != "extra"
                and f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING
            ):
                kwargs[f.name] = None
        return cls(**kwargs, extra=extra)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object this model was made from (unknown members included)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name == "extra":
                continue
            out[self._wire.get(f.name, f.name)] = _plain(getattr(self, f.name))
        out.update(self.extra)
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, Model):
        return value.to_dict()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
