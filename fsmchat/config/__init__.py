"""Configs: patterns and flows as data.

Its modules sit in one layer (docs/architecture.md's layer table):

- ``kinds``: the registries of kinds (a config's ``kind`` -> the pydantic model of its data form),
  which patterns, flow steps and scripted models register with;
- ``values``: single values in their config form and back (a function by its import path, options
  without their secrets, a tool's entry);
- ``convert``: ``to_config`` / ``from_config`` and the config models (``AgentSpec``, ``PatternSpec``...).

What a config may make fsmchat import is ``fsmchat.trust``'s rule.

``fsmchat.config.NAME`` is ``fsmchat.config.convert.NAME``, loaded on first use, so importing
``fsmchat.config.kinds`` (which patterns and flow steps register with) loads no speaker.

Examples:
    >>> from fsmchat.config import from_config, to_config
    >>> from fsmchat import RoundRobinSwarm
    >>> def poet(turn):
    ...     return "A line."
    >>> cfg = to_config(RoundRobinSwarm(agents=[poet], max_loops=1))
    >>> cfg.kind, type(from_config(cfg)).__name__
    ('round_robin', 'RoundRobinSwarm')
"""
from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING, Any

__all__ = ["CONFIG_VERSION", "PATTERN_KINDS", "STEP_KINDS", "MODEL_KINDS", "AgentSpec", "HandoffSpec", "ContextSpec",
           "CallableSpec", "HumanSpec", "Participant", "Participants", "PatternSpec", "FactorySpec", "ConfigWriter",
           "ConfigReader", "to_config", "from_config", "parse_config", "pattern_spec", "config_digest", "references",
           "specs_in"]


def __getattr__(name: str) -> Any:
    """``fsmchat.config.NAME``: the name of ``convert`` (its config forms by their earlier names too)."""
    value = getattr(importlib.import_module(".convert", __name__), name)
    setattr(sys.modules[__name__], name, value)  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(vars(sys.modules[__name__])) | set(__all__))


if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly (``__all__`` re-exports them)
    from .convert import (CONFIG_VERSION, MODEL_KINDS, PATTERN_KINDS, STEP_KINDS, AgentSpec, CallableSpec,
                          ConfigReader, ConfigWriter, ContextSpec, FactorySpec, HandoffSpec, HumanSpec, Participant,
                          Participants, PatternSpec, config_digest, from_config, parse_config, pattern_spec,
                          references, specs_in, to_config)
