"""Lazy re-exports (PEP 562): a package facade imports a public name's module on the name's first use.

``import fsmchat`` and the facades of ``fsmchat.speakers`` and ``fsmchat.patterns`` cost almost
nothing: ``from fsmchat import RoundRobinSwarm`` imports the round robin's module and what it
needs, not every other pattern.
"""
from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose public names load on first use.

    Args:
        package: The package's ``__name__``.
        exports: Each public name -> the module (relative to ``package``, e.g. ``".agent"``) that defines it.

    Returns:
        ``(__getattr__, __dir__)``: assign them in the package's ``__init__``. A loaded name is kept
        in the package's namespace, so later lookups skip ``__getattr__``; an unknown name is an
        ``AttributeError`` as for any module. A name must not be one of the package's submodules
        (importing the submodule would set the package's attribute to the module).

    Examples:
        >>> getattr_, dir_ = lazy_exports("fsmchat", {"Message": ".models"})
        >>> getattr_("Message").__name__
        'Message'
        >>> "Message" in dir_()
        True
    """
    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
