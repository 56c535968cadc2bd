"""Registries of kinds: the ``kind`` a config names, mapped to the pydantic model that is its data
form. The module that defines a kind registers it (patterns with ``class GroupChat(Pattern,
kind="group_chat", config=...)``, flow steps with ``class Loop(Block, kind="loop", config=...)``, the
testing kit its scripted models with ``MODEL_KINDS.register``), so a new kind touches no central file.

Trust: a lookup never imports a module a config names. The only imports a registry makes are its
``loaders``, fsmchat's own modules that define the built-in kinds, imported once when a kind is
first looked up (``from_config`` works in a process that never imported ``fsmchat.patterns``). A
kind registered by a module outside fsmchat is there because that module was imported by the
process's own code; ``from_config`` still builds it only when the caller's ``Trust`` allows that
module (``owner_module``), as for any other reference.
"""
from __future__ import annotations

import importlib
import typing
from typing import Generic, Iterable, TypeVar

from pydantic import BaseModel

from ..errors import ConfigError

S = TypeVar("S", bound=BaseModel)


def kinds_of(spec: type[BaseModel]) -> tuple[str, ...]:
    """The kinds a spec model stands for: its ``kind`` field's ``Literal`` values (or its default)."""
    field = spec.model_fields.get("kind")
    if field is None:
        raise TypeError(f"{spec.__name__} has no 'kind' field, so it cannot be registered as a kind")
    values = typing.get_args(field.annotation) if typing.get_origin(field.annotation) is typing.Literal else ()
    kinds = tuple(str(v) for v in values) or ((str(field.default),) if isinstance(field.default, str) else ())
    if not kinds:
        raise TypeError(f"{spec.__name__}.kind must be a Literal['...'] (or have a str default) to be registered")
    return kinds


def owner_module(spec: type[BaseModel]) -> str:
    """The module that defines ``spec`` (what a caller's ``Trust`` must allow to build it)."""
    return spec.__module__


class Kinds(Generic[S]):
    """``kind`` -> spec model, for one family (``"pattern"``, ``"flow step"``, ``"model"``).

    ``validate`` turns a dict into the spec model of its ``kind``; as a pydantic field type,
    ``Annotated[Any, PlainValidator(STEP_KINDS.validate)]`` (``fsmchat.config.AnyStep``) does the
    same for each value of a field. An unknown kind is a ``ConfigError`` naming the known ones."""

    def __init__(self, what: str, loaders: Iterable[str] = ()):
        self.what = what
        self.loaders = tuple(loaders)
        self._specs: dict[str, type[S]] = {}
        self._loaded = False

    def register(self, spec: type[S]) -> type[S]:
        """Register ``spec`` under each of its kinds (usable as a class decorator). A kind another
        class already holds is refused; a module imported again replaces its own class."""
        for kind in kinds_of(spec):
            old = self._specs.get(kind)
            if old is not None and old is not spec and \
                    (owner_module(old), old.__qualname__) != (owner_module(spec), spec.__qualname__):
                raise ConfigError(f"{self.what} kind {kind!r} is already registered by {owner_module(old)} "
                                  f"({old.__qualname__}); {owner_module(spec)} must choose another kind")
            self._specs[kind] = spec
        return spec

    def load(self) -> None:
        """Import the ``loaders`` (fsmchat's packages defining the built-in kinds) and every name
        they export (their facades load names on first use), once."""
        if not self._loaded:
            self._loaded = True
            for module in self.loaders:
                package = importlib.import_module(module)
                for name in getattr(package, "__all__", ()):
                    getattr(package, name)

    def known(self) -> list[str]:
        """Every registered kind, sorted."""
        self.load()
        return sorted(self._specs)

    def spec(self, kind: object) -> type[S]:
        """The spec model registered for ``kind``; ``ConfigError`` naming the known kinds otherwise."""
        if not isinstance(kind, str) or kind not in self._specs:
            self.load()
        found = self._specs.get(kind) if isinstance(kind, str) else None
        if found is None:
            raise ConfigError(f"{self.what} kind={kind!r} is invalid: one of {self.known()}")
        return found

    def validate(self, value: object) -> S:
        """``value`` (a spec model or a dict with a ``kind``) as the spec model of its kind."""
        if isinstance(value, BaseModel):
            kind = getattr(value, "kind", None)
            spec = self.spec(kind)
            if type(value) is not spec or not isinstance(value, spec):
                raise ConfigError(f"{self.what} kind={kind!r} is invalid: a {type(value).__name__} is not the "
                                  f"{self.what} registered under that kind")
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{self.what}={value!r:.80} is invalid: a dict with a 'kind' (one of {self.known()})")
        return self.spec(value.get("kind")).model_validate(value)

    def __contains__(self, kind: str) -> bool:
        self.load()
        return kind in self._specs
