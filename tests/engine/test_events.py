"""The run's events as declared models (fsmchat/events.py): every kind the package records is declared,
each reads from its stored JSON into its model and back to the same JSON (runs recorded before the
models load unchanged), code matches on them, and the table of docs/streaming.md is the models'."""
import re
from pathlib import Path

import pytest

from fsmchat import RoundRobinSwarm
from fsmchat.events import (DECLARED, BidTools, Budget, Compacted, Deadline, Edited, Handoff, InvalidBid,
                            MessageTruncated, OfflineNoToolCall, OtherEvent, PartialReply, PromptTokens, RateLimited,
                            Rejected, Retry, RouteNoMatch, Selected, SelectorFallback, SelectorRetry, StepFailed,
                            StopWorkflow, StreamRetried, TemplateErrorEvent, TextRepaired, ToolDecision,
                            ToolErrorEvent, ToolModeFallback, ToolResultTruncated, TransportFallback, event_table,
                            parse_event, parse_events, with_table)
from fsmchat.models import RunResult

ROOT = Path(__file__).resolve().parents[2]

# One event of each kind as the package writes it (the shapes of fsmchat/ today and of earlier runs).
STORED = [
    (BidTools, {"event": "bid_tools", "turn": 1, "agent": "a",
                "tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 1}}]}),
    (Budget, {"event": "budget", "limit": "max_calls"}),
    (Compacted, {"event": "compacted", "state": "compact", "by": "summarizer", "covers": [1, 4], "upto": 4,
                 "summary": "They agreed."}),
    (Compacted, {"event": "compacted", "upto": 4}),
    (Deadline, {"event": "deadline", "step": "draft", "detail": "step 'draft' ran past the deadline"}),
    (Edited, {"event": "edited", "state": "review", "vars": ["tone"]}),
    (Edited, {"event": "edited", "turn": 2, "agent": "b"}),
    (Handoff, {"event": "handoff", "from": "triage", "to": "billing", "message": "a refund", "call_id": "c2",
               "ignored_calls": ["c3"], "turn": 0}),
    (InvalidBid, {"event": "invalid_bid", "turn": 1, "agent": "c", "reason": "score 1.5 is over 1"}),
    (MessageTruncated, {"event": "message_truncated", "role": "a", "chars": 250000, "kept": 200000}),
    (OfflineNoToolCall, {"event": "offline_no_tool_call", "agent": "a", "tools": ["add"], "request": "Add 2 and 3"}),
    (PartialReply, {"event": "partial_reply", "agent": "a", "step": "turn_1", "attempt": 1, "chars": 12,
                    "reason": "TimeoutError: (no message)"}),
    (PartialReply, {"event": "partial_reply", "agent": "a", "step": None, "attempt": 2, "chars": 3,
                    "reason": "cancelled", "text": "Not"}),
    (PromptTokens, {"event": "prompt_tokens", "agent": "a", "tokens": 90}),
    (PromptTokens, {"event": "prompt_tokens", "agent": "b", "tokens": 260, "limit": 200, "policy": "full",
                    "refused": True}),
    (RateLimited, {"event": "rate_limited", "agent": "a", "limit": "openai/gpt-4o", "waited_s": 0.25}),
    (Rejected, {"event": "rejected", "state": "post", "reason": "off topic"}),
    (Rejected, {"event": "rejected", "step": "ask", "reason": "no"}),
    (Rejected, {"event": "rejected", "turn": 3, "agent": "a", "reason": "a person spoke instead"}),
    (Retry, {"event": "retry", "step": "fetch", "attempt": 1, "error": "RuntimeError('down')"}),
    (RouteNoMatch, {"event": "route_no_match", "route": "triage", "keys": ["bug", "idea"], "default": False,
                    "value": "question", "on": "kind", "note": "no key matched; no default, so the route runs no step"}),
    (RouteNoMatch, {"event": "route_no_match", "route": "triage", "keys": ["bug"], "default": True,
                    "previous_output": "hm", "note": "no key matched; the default steps run"}),
    (Selected, {"event": "selected", "turn": 2, "speaker": "b", "by": "selector", "candidates": ["a", "b"]}),
    (SelectorFallback, {"event": "selector_fallback", "turn": 2, "speaker": "a", "attempts": 3}),
    (SelectorRetry, {"event": "selector_retry", "turn": 2, "attempt": 1, "reason": "'z' is not a candidate"}),
    (StepFailed, {"event": "step_failed", "step": "fetch", "error": "RuntimeError('down')", "policy": "continue"}),
    (StopWorkflow, {"event": "stop_workflow", "step": "draft"}),
    (StreamRetried, {"event": "stream_retry", "agent": "a", "step": "turn_1", "attempt": 1, "shown": 10,
                     "reason": "TimeoutError: (no message)"}),
    (TemplateErrorEvent, {"event": "template_error", "where": "step 'draft'", "template": "{{topic}}",
                          "reason": "'topic' is not set"}),
    (TextRepaired, {"event": "text_repaired", "role": "task", "replaced": 1}),
    (ToolDecision, {"event": "tool_decision", "agent": "a", "tool": "pay", "call_id": "c1", "decision": "approve"}),
    (ToolErrorEvent, {"event": "tool_error", "agent": "a", "tool": "add", "call_id": "c1", "error": "boom"}),
    (ToolModeFallback, {"event": "tool_mode_fallback", "agent": "a", "model": "ollama/llama3",
                        "reason": "tools are not supported", "turn": 1}),
    (ToolResultTruncated, {"event": "tool_result_truncated", "agent": "a", "tool": "read", "call_id": "c1",
                           "chars": 90000, "kept": 20000}),
    (TransportFallback, {"event": "transport_fallback", "agent": "a", "model": "openai/gpt-4o",
                         "reason": "the fast path cannot send images"}),
]


@pytest.mark.parametrize("model, stored", STORED, ids=[f"{s['event']}-{i}" for i, (_, s) in enumerate(STORED)])
def test_each_stored_kind_reads_into_its_model_and_back_to_the_same_json(model, stored):
    event = parse_event(stored)
    assert type(event) is model
    assert event.to_dict() == stored
    assert list(event.to_dict()) == list(stored)  # and the keys in the stored order


def test_every_declared_kind_has_a_stored_example():
    assert {type(parse_event(s)) for _, s in STORED} == set(DECLARED)
    assert len(DECLARED) == 28


def test_every_kind_the_package_records_is_declared():
    """Each ``{"event": "<kind>", ...}`` literal of fsmchat/ (docstring examples aside) has its model."""
    recorded = set()
    for path in (ROOT / "fsmchat").rglob("*.py"):
        for line in path.read_text().splitlines():
            if ">>>" not in line and "... " not in line:
                recorded |= set(re.findall(r'"event": "(\w+)"', line))
    declared = {m.model_fields["event"].default for m in DECLARED}
    assert recorded - declared == set(), "declare these kinds in fsmchat/events.py"
    assert "compacted" in declared and "stream_retry" in recorded  # a constant-named kind, and a literal one


def test_an_undeclared_kind_or_a_misfit_is_another_event_kept_as_stored():
    newer = {"event": "made_up", "said": "hi", "n": [1, 2]}
    misfit = {"event": "tool_error", "agent": 1}  # an int agent, no tool: not a ToolErrorEvent
    assert [type(e) for e in parse_events([newer, misfit])] == [OtherEvent, OtherEvent]
    assert [e.to_dict() for e in parse_events([newer, misfit])] == [newer, misfit]
    assert parse_event({"step": "x"}).to_dict() == {"event": "None", "step": "x"}  # no kind at all


def test_keys_a_model_does_not_declare_are_kept():
    stored = {"event": "stop_workflow", "step": "draft", "by": "a newer fsmchat"}
    event = parse_event(stored)
    assert (type(event), event.step, event.model_extra) == (StopWorkflow, "draft", {"by": "a newer fsmchat"})
    assert event.to_dict() == stored


def test_code_matches_on_the_kinds():
    seen = []
    for event in parse_events([s for _, s in STORED[:8]]):
        match event:
            case Compacted(upto=upto, summary=None):
                seen.append(f"compacted up to {upto}, no summary kept")
            case Compacted(upto=upto, by=by):
                seen.append(f"{by} compacted up to {upto}")
            case Handoff(source=source, to=to):
                seen.append(f"{source} -> {to}")
            case Edited(vars=[*names]):
                seen.append(f"edited {names}")
            case _:
                pass
    assert seen == ["summarizer compacted up to 4", "compacted up to 4, no summary kept", "edited ['tone']",
                    "triage -> billing"]


def test_a_run_s_events_read_as_models():
    """A task with a lone surrogate: the runner records its repair (``text_repaired``)."""
    result = RoundRobinSwarm(agents=[lambda turn: "ok"], max_loops=1).execute("Ship it\ud800?")
    assert result.events == [{"event": "text_repaired", "role": "task", "replaced": 1}]
    assert result.typed_events() == [TextRepaired(role="task", replaced=1)]


def test_typed_events_reads_the_result_s_events_in_order():
    result = RunResult(path=[], trace=[], stop_reason="done", context=None,
                       events=[{"event": "budget", "limit": "max_calls"}, {"event": "note"}])
    assert [type(e).__name__ for e in result.typed_events()] == ["Budget", "OtherEvent"]


def test_the_docs_table_is_the_models_table():
    page = (ROOT / "docs" / "streaming.md").read_text()
    assert with_table(page) == page, "run `python -m fsmchat.events docs/streaming.md`"
    assert "| `tool_error` | `ToolErrorEvent` | `agent: str`, `tool: str`, `call_id: str`, `error: str or None` |" \
        in event_table()
    assert event_table().count("\n") == 2 + 28


def test_a_page_without_the_markers_is_refused():
    with pytest.raises(ValueError, match="no events table markers"):
        with_table("# Events\n")
