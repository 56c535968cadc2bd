"""Layer 15: conversation patterns, each compiled to a StateGraph and run by the one engine.

A pattern of your own imports what it is declared with from here: ``Pattern``, ``PatternConfig``
and its field types (``Participants``, ``OneParticipant``), ``ChatContext`` and ``PatternState``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..common.facade import lazy_exports

_MODULES = {  # each module -> the public names it defines
    '.base': ('ChatContext', 'Pattern', 'PatternState'),
    '.declare': ('OneParticipant', 'Participants', 'PatternConfig'),
    '.runner': ('FailedRuns',),
    '.debate': ('DebateConfig', 'DebateContext', 'DebateState', 'OneOnOneDebate', 'compile_debate',
        'one_on_one_debate'),
    '.group_chat': ('GroupChat', 'GroupChatConfig', 'GroupChatContext', 'GroupChatState', 'compile_group_chat'),
    '.panel': ('ExpertPanelDiscussion', 'PanelConfig', 'PanelContext', 'PanelState', 'compile_panel'),
    '.handoffs': ('Handoffs', 'HandoffsConfig', 'HandoffsContext', 'HandoffsState', 'Swarm', 'compile_handoffs'),
    '.selector': ('SelectionError', 'SelectorConfig', 'SelectorContext', 'SelectorGroupChat', 'SelectorState',
        'compile_selector'),
    '.round_robin': ('RoundRobinConfig', 'RoundRobinContext', 'RoundRobinSwarm', 'build_collaborative_task',
        'build_turn_header', 'compile_round_robin'),
}
__all__ = ["Pattern", "PatternConfig", "Participants", "OneParticipant", "FailedRuns",
           "PatternState", "ChatContext", "GroupChat", "GroupChatConfig",
           "GroupChatContext", "GroupChatState", "compile_group_chat", "RoundRobinSwarm", "RoundRobinConfig",
           "RoundRobinContext", "compile_round_robin", "build_turn_header", "build_collaborative_task",
           "OneOnOneDebate", "one_on_one_debate", "DebateConfig", "DebateContext", "DebateState", "compile_debate",
           "ExpertPanelDiscussion", "PanelConfig", "PanelContext", "PanelState", "compile_panel",
           "SelectorGroupChat", "SelectorConfig", "SelectorContext", "SelectorState", "SelectionError",
           "compile_selector", "Handoffs", "Swarm", "HandoffsConfig", "HandoffsContext", "HandoffsState",
           "compile_handoffs"]
__getattr__, __dir__ = lazy_exports(__name__, _MODULES)

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly (``__all__`` re-exports them)
    from .base import ChatContext, Pattern, PatternState
    from .declare import OneParticipant, Participants, PatternConfig
    from .runner import FailedRuns
    from .debate import DebateConfig, DebateContext, DebateState, OneOnOneDebate, compile_debate, one_on_one_debate
    from .group_chat import GroupChat, GroupChatConfig, GroupChatContext, GroupChatState, compile_group_chat
    from .panel import ExpertPanelDiscussion, PanelConfig, PanelContext, PanelState, compile_panel
    from .handoffs import Handoffs, HandoffsConfig, HandoffsContext, HandoffsState, Swarm, compile_handoffs
    from .selector import SelectionError, SelectorConfig, SelectorContext, SelectorGroupChat, SelectorState, \
        compile_selector
    from .round_robin import RoundRobinConfig, RoundRobinContext, RoundRobinSwarm, build_collaborative_task, \
        build_turn_header, compile_round_robin
