"""Helpers for state-transition tests of fsmchat graphs and of users' own workflows.

- ``models``: ``ScriptedModel`` / ``FunctionModel``, scripted per agent (replies, bids, malformed
  tool calls, errors, delays), answering in process through fsmchat's own speaking path and
  recording every request; they fail loudly, naming the agent and call number, when a script runs out.
- ``expect``: ``assert_trace_is_path``, ``assert_path``, ``assert_stop``, ``assert_calls``,
  ``assert_trace`` (with ``ANY``, ``ANY_TIME``, ``ANY_ID``), graph snapshots (``assert_graph_matches``).
- ``people``: ``answer(pattern, task, answers=[...])``: run and answer every interrupt.
- ``replay``: record a real run once and replay it (``cassette(path)``).
- ``plugin``: the pytest plugin (entry point ``pytest11``): the fixtures ``scripted_model``, ``fsm_run``
  and ``cassette``.

The names load on first use, so pytest loading the plugin in every session imports no model or
expectation.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..common.facade import lazy_exports

_MODULES = {  # each module -> the public names it defines
    "..models": ("Bid",),  # a script item: a bid's reply
    ".expect": ("ANY", "ANY_ID", "ANY_TIME", "UPDATE_GRAPHS", "assert_calls", "assert_graph_matches", "assert_path",
                "assert_stop", "assert_trace", "assert_trace_is_path", "update_graphs_enabled"),
    ".models": ("KEEP_MESSAGES", "SCRIPTED_PROVIDER", "Delay", "DroppedMessages", "Empty", "Fail", "FunctionModel",
                "Pick", "Request", "ScriptedModel", "ScriptedModelSpec", "ScriptExhausted", "ScriptItemSpec",
                "ToolCall", "Transfer", "build_scripted_model", "fail_error", "scripted_model_spec"),
    ".people": ("AnswerScriptError", "Answered", "answer"),
    ".replay": ("Cassette", "CassetteMiss", "cassette", "request_key"),
}
__all__ = ["Bid", "Cassette", "CassetteMiss", "cassette", "request_key", "ANY", "ANY_ID", "ANY_TIME",
           "UPDATE_GRAPHS", "assert_calls", "assert_graph_matches", "assert_path", "assert_stop", "assert_trace",
           "assert_trace_is_path", "update_graphs_enabled", "KEEP_MESSAGES", "SCRIPTED_PROVIDER", "Delay",
           "DroppedMessages", "Empty", "Fail", "FunctionModel", "Pick", "Request", "ScriptedModel",
           "ScriptedModelSpec", "ScriptExhausted", "ScriptItemSpec", "ToolCall", "Transfer", "build_scripted_model",
           "fail_error", "scripted_model_spec", "AnswerScriptError", "Answered", "answer"]
__getattr__, __dir__ = lazy_exports(__name__, _MODULES)

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly (``__all__`` re-exports them)
    from ..models import Bid  # a script item: a bid's reply
    from .expect import (ANY, ANY_ID, ANY_TIME, UPDATE_GRAPHS, assert_calls, assert_graph_matches, assert_path,
                         assert_stop, assert_trace, assert_trace_is_path, update_graphs_enabled)
    from .models import (KEEP_MESSAGES, SCRIPTED_PROVIDER, Delay, DroppedMessages, Empty, Fail, FunctionModel, Pick,
                         Request, ScriptedModel, ScriptedModelSpec, ScriptExhausted, ScriptItemSpec, ToolCall, Transfer,
                         build_scripted_model, fail_error, scripted_model_spec)
    from .people import AnswerScriptError, Answered, answer
    from .replay import Cassette, CassetteMiss, cassette, request_key
