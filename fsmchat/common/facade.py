"""Lazy re-exports (PEP 562): a package facade imports a public name's module on the name's first use.

``import fsmchat`` and the facades of ``fsmchat.speakers`` and ``fsmchat.patterns`` cost almost
nothing: ``from fsmchat import RoundRobinSwarm`` imports the round robin's module and what it
needs, not every other pattern.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any, Callable, Iterable, Mapping, Sequence


def lazy_exports(package: str, modules: Mapping[str, Iterable[str]]) -> tuple[Callable[[str], Any],
                                                                             Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose public names load on first use.

    Args:
        package: The package's ``__name__``.
        modules: Each module (relative to ``package``, e.g. ``".agent"``) -> the public names it defines.

    Returns:
        ``(__getattr__, __dir__)``: assign them in the package's ``__init__``. A loaded name is kept
        in the package's namespace, so later lookups skip ``__getattr__``; an unknown name is an
        ``AttributeError`` as for any module. A name must not be one of the package's submodules
        (importing the submodule would set the package's attribute to the module).

    Examples:
        >>> getattr_, dir_ = lazy_exports("fsmchat", {".models": ["Message"]})
        >>> getattr_("Message").__name__
        'Message'
        >>> "Message" in dir_()
        True
    """
    exports = {name: module for module, names in modules.items() for name in names}

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


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Old import paths of modules that moved into packages: importing one gives the module at its new path.

    ``sys.meta_path`` holds one (``fsmchat/__init__.py`` installs it), so ``import fsmchat.checkpoint``
    and ``from fsmchat.live import LiveRun`` keep working, as do ``MODULE:ATTR`` references stored
    in configs and checkpoints before the move; ``fsmchat.checkpoint`` is then the very module
    ``fsmchat.store.checkpoint``.

    Args:
        moves: Each old dotted path -> its new one.

    Examples:
        >>> import sys
        >>> finder = MovedModules({"fsmchat.old_models": "fsmchat.models"})
        >>> sys.meta_path.append(finder)
        >>> import fsmchat.old_models, fsmchat.models
        >>> fsmchat.old_models is fsmchat.models
        True
        >>> sys.meta_path.remove(finder)
    """

    def __init__(self, moves: Mapping[str, str]):
        self.moves = dict(moves)

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        """A spec for an old path (this finder loads it), else None (other finders look)."""
        return importlib.util.spec_from_loader(fullname, self) if fullname in self.moves else None

    def exec_module(self, module: ModuleType) -> None:
        """Import the new path and stand it in for the old one (the import system returns what
        ``sys.modules`` holds under the old name once this returns)."""
        sys.modules[module.__name__] = importlib.import_module(self.moves[module.__name__])
