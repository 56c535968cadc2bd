"""Layer 15, patterns: how a pattern declares its parameters, once, by one pydantic model.

``class GroupChat(Pattern, kind="group_chat", config=GroupChatConfig)``: the model's fields, in
order, are the constructor's parameters; it validates them (a bad value is a ``ConfigError``
naming the field); the pattern's attributes (``chat.max_loops``) read and write them
(``ConfigField``); ``to_config``/``from_config`` derive the pattern's config form from it.

A field that holds live objects says how it travels in a config, with one of the field types
re-exported here: ``Participants`` (a roster: agents, callables, people), ``OneParticipant`` (one
of them, such as a moderator; required unless the field has a default), ``OutputType`` (the
``output_type`` names ``fsmchat.models.format_output`` knows). A number field declares the one
number rule, also re-exported here: ``Annotated[int, Count(1)]`` for a count,
``Annotated[float, Amount(gt=0)]`` for seconds or any other amount (``fsmchat.checks.Number``).
"""
from __future__ import annotations

import copy
import inspect
from typing import Annotated, Any, Mapping, Sequence, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError
from typing_extensions import Self

from ..checks import Amount, Count, check_keywords
from ..config.convert import OneParticipant, Participants
from ..errors import invalid_config
from ..models import check_output_type

__all__ = ["Amount", "ConfigField", "Count", "OneParticipant", "OutputType", "Participants", "PatternConfig",
           "bind_arguments", "constructor_signature", "field_parameters"]

OutputType = Annotated[str, AfterValidator(check_output_type)]
V = TypeVar("V")


def bind_arguments(owner: str, names: Sequence[str], args: Sequence[V], kwargs: Mapping[str, V]) -> dict[str, V]:
    """A declared constructor's arguments by name: ``args`` in the order of ``names`` (the model's
    fields), then ``kwargs``; too many, a repeated one and an unknown name (with the closest
    option) are refused in ``owner``'s name."""
    if len(args) > len(names):
        raise TypeError(f"{owner}() takes at most {len(names)} positional arguments ({len(args)} given)")
    values = dict(kwargs)
    for name, value in zip(names, args):
        if name in values:
            raise TypeError(f"{owner}() got multiple values for argument {name!r}")
        values[name] = value
    check_keywords(values, tuple(names), owner, "options")
    return values


class PatternConfig(BaseModel):
    """Base of every pattern's one model: its fields are the pattern's parameters and attributes.

    The fields, in order, are the pattern's constructor parameters and its attributes; a bad
    value is a ``ConfigError`` naming the field (``"GroupChat: max_loops=0 is invalid: an int >= 1
    (cap on total messages, the task included)"``), or a ``ConfigTypeError`` for a value of the
    wrong type, whether passed to the pattern, set on it later (``chat.max_loops = 0``) or given to
    the model itself. A number field declares the one number rule (``Annotated[int, Count(1)]``,
    ``fsmchat.checks.Number``): a bool or a string is never taken for a number. A field holding
    live objects says how it travels in a config (``fsmchat.config.Participants``,
    ``FlowSteps``...). Unknown fields are refused.

    Examples:
        >>> from typing import Annotated
        >>> from fsmchat.patterns import PatternConfig
        >>> from fsmchat.patterns.declare import Count
        >>> class RelayConfig(PatternConfig):
        ...     rounds: Annotated[int, Count(1, "passes over the roster")] = 2
        >>> RelayConfig(rounds=3).rounds
        3
        >>> RelayConfig.make("Relay", rounds=0)
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigError: Relay: rounds=0 is invalid: an int >= 1 (passes over the roster)
        >>> RelayConfig.make("Relay", rounds="3")
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigTypeError: Relay: rounds='3' is invalid: an int >= 1 (passes over the roster), not a str
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, arbitrary_types_allowed=True)

    def __init__(self, owner: str | None = None, /, **values: object) -> None:
        """Validate ``values``; a bad one is refused in ``owner``'s name.

        Args:
            owner: Whose name a refusal is given in (the model's by default).
            **values: The fields.
        """
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise invalid_config(owner or type(self).__name__, exc) from None

    @classmethod
    def make(cls, owner: str, **values: object) -> Self:
        """The model of ``values``, a bad one refused in ``owner``'s name (``"GroupChat: ..."``)."""
        return cls(owner, **values)

    def __setattr__(self, name: str, value: object) -> None:
        self.assign(type(self).__name__, name, value)

    def assign(self, owner: str, name: str, value: object) -> None:
        """Set a field, validated as at construction (refused in ``owner``'s name)."""
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise invalid_config(owner, exc) from None


class ConfigField:
    """A pattern attribute that is a field of its model: read from ``pattern.config``; written as
    a new config with the field set (validated), so the graph is compiled again on next use."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return getattr(obj.config, self.name)

    def __set__(self, obj: Any, value: object) -> None:
        config = copy.copy(obj.config)
        config.assign(type(obj).__name__, self.name, value)
        obj.config = config  # a new config: the pattern's graph is compiled again on next use


def field_parameters(model: type[BaseModel]) -> list[inspect.Parameter]:
    """A declared constructor's parameters, as ``help()`` and IDEs show them: the model's fields in
    order; a required field after one with a default (a moderator after the roster) is shown
    keyword-only from there on, as Python spells it."""
    params: list[inspect.Parameter] = []
    keyword_only = False
    for name, f in model.model_fields.items():
        keyword_only = keyword_only or (f.is_required() and bool(params) and
                                        params[-1].default is not inspect.Parameter.empty)
        params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY if keyword_only else
                                        inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=f.annotation,
                                        default=inspect.Parameter.empty if f.is_required() else f.default))
    return params


def constructor_signature(config: type[PatternConfig]) -> inspect.Signature:
    """The pattern's signature: its fields (``field_parameters``), then the keyword-only
    ``interrupt_before``/``interrupt_after``."""
    return inspect.Signature(field_parameters(config) + [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                                                             default=None)
                                                           for name in ("interrupt_before", "interrupt_after")])
