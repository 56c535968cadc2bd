"""Helpers for state-transition tests of fsmchat graphs and of users' own workflows.

- ``models``: ``ScriptedModel`` / ``FunctionModel``, scripted per agent (replies, bids, malformed
  tool calls, errors, delays), answering in process through fsmchat's own speaking path and
  recording every request; they fail loudly, naming the agent and call number, when a script runs out.
- ``expect``: ``assert_trace_is_path``, ``assert_path``, ``assert_stop``, ``assert_calls``,
  ``assert_trace`` (with ``ANY``, ``ANY_TIME``, ``ANY_ID``), graph snapshots (``assert_graph_matches``).
- ``people``: ``answer(pattern, task, answers=[...])``: run and answer every interrupt.
- ``replay``: record a real run once and replay it (``cassette(path)``).

The pytest plugin (``fsmchat.pytest_plugin``) provides the fixtures ``scripted_model``, ``fsm_run``
and ``cassette``.
"""
from ..models import Bid  # a script item: a bid's reply
from .expect import (ANY, ANY_ID, ANY_TIME, UPDATE_GRAPHS, assert_calls, assert_graph_matches, assert_path,
                     assert_stop, assert_trace, assert_trace_is_path, update_graphs_enabled)
from .models import (KEEP_MESSAGES, SCRIPTED_PROVIDER, Delay, DroppedMessages, Empty, Fail, FunctionModel, Pick,
                     Request, ScriptedModel, ScriptedModelSpec, ScriptExhausted, ScriptItemSpec, ToolCall, Transfer,
                     build_scripted_model, fail_error, scripted_model_spec)
from .people import AnswerScriptError, Answered, answer
from .replay import Cassette, CassetteMiss, cassette, request_key

__all__ = ["Bid", "Cassette", "CassetteMiss", "cassette", "request_key", "ANY", "ANY_ID", "ANY_TIME",
           "UPDATE_GRAPHS", "assert_calls", "assert_graph_matches", "assert_path", "assert_stop", "assert_trace",
           "assert_trace_is_path", "update_graphs_enabled", "KEEP_MESSAGES", "SCRIPTED_PROVIDER", "Delay",
           "DroppedMessages", "Empty", "Fail", "FunctionModel", "Pick", "Request", "ScriptedModel",
           "ScriptedModelSpec", "ScriptExhausted", "ScriptItemSpec", "ToolCall", "Transfer", "build_scripted_model",
           "fail_error", "scripted_model_spec", "AnswerScriptError", "Answered", "answer"]
