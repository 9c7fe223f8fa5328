"""Package names that load their module on first use (PEP 562), so importing a light submodule stays light."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_attributes(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``name`` comes from ``package.<where[name]>`` when first asked for."""

    def __getattr__(name: str) -> Any:
        if name in where:
            return getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        raise AttributeError(f"module '{package}' has no attribute '{name}'")

    return __getattr__


__all__ = ["lazy_attributes"]
