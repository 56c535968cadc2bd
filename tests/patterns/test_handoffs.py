"""Handoffs (OpenAI's Swarm / Agents SDK handoffs, AutoGen's Swarm, langgraph-swarm): the active
agent speaks until a transfer_to_<name> call hands the conversation on. Paths, stops, events,
people handed to, durability across a SIGKILL, input filters, tools, bad input."""
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from fsmchat import Agent, AgentFlow, Handoff, Handoffs, Human, MemoryCheckpointer, Say, Swarm, Tool
from fsmchat.store.checkpoint import SqliteCheckpointer
from fsmchat.errors import ConfigError
from fsmchat.testing import Pick, ScriptedModel, ToolCall, Transfer, assert_path, assert_stop, assert_trace_is_path

TASK = "I was charged twice for my order."


def test_a_handoff_ends_the_turn_and_the_receiver_answers():
    model = ScriptedModel({"triage": [Transfer("billing", "double charge on order 7")],
                           "billing": ["I refunded the second charge."]})
    chat = Handoffs([model.agent("triage", handoffs=["billing", "tech"]), model.agent("billing"),
                     model.agent("tech")])
    r = chat.execute(TASK)
    assert_trace_is_path(chat.graph, r)
    assert_path(r, ["seed", "triage", "billing", "stop"])
    assert_stop(r, "answered")
    assert [(m.role, m.content) for m in r.transcript] == [("User", TASK), ("triage", "double charge on order 7"),
                                                           ("billing", "I refunded the second charge.")]
    assert r.transcript[1].metadata["handoff"] == {"to": "billing", "message": "double charge on order 7"}
    assert [(e["from"], e["to"], e["turn"]) for e in r.events if e["event"] == "handoff"] == [("triage", "billing", 0)]
    assert (model.calls("triage"), model.calls("billing"), model.calls("tech")) == (1, 1, 0)
    assert [t["function"]["name"] for t in model.requests_of("triage")[0].tools] == ["transfer_to_billing",
                                                                                     "transfer_to_tech"]
    assert "triage handed the conversation to you. Their note: double charge on order 7" in \
        model.requests_of("billing")[0].prompt
    assert [tr.trigger for tr in r.trace][1:3] == ["transfer_to_billing", "answered"]


def test_every_possible_handoff_is_a_labelled_edge():
    chat = Handoffs([Agent("triage", handoffs=["billing", "tech"]), Agent("billing", handoffs=["triage"]),
                     Agent("tech", handoffs=["triage", "customer"]), Human("customer")])
    g = chat.graph
    assert sorted((t.source, t.dest, t.label) for t in g.transitions if t.label.startswith("transfer_to_")) == [
        ("billing", "triage", "transfer_to_triage"), ("tech", "customer", "transfer_to_customer"),
        ("tech", "triage", "transfer_to_triage"), ("triage", "billing", "transfer_to_billing"),
        ("triage", "tech", "transfer_to_tech")]
    assert sorted((t.dest, t.label) for t in g.transitions if t.source == "customer" and t.dest != "stop") == [
        ("billing", "billing"), ("tech", "tech"), ("triage", "triage")]
    assert g.states["customer"].waits


def test_on_reply_continue_keeps_the_floor_and_a_repeated_cycle_is_a_livelock():
    model = ScriptedModel(fn=lambda req: "Still checking.")
    chat = Handoffs([model.agent("a", handoffs=["b"]), model.agent("b")], on_reply="continue", max_turns=9)
    r = chat.execute(TASK)
    assert_stop(r, "livelock")
    assert_path(r, ["seed", "a", "a", "a", "stop"])
    assert model.calls("a") == 3
    varied = ScriptedModel(fn=lambda req: f"check {req.n}")
    r = Handoffs([varied.agent("a", handoffs=["b"]), varied.agent("b")], on_reply="continue", max_turns=4).execute(TASK)
    assert_stop(r, "max_turns")
    assert [m.content for m in r.transcript[1:]] == ["check 1", "check 2", "check 3", "check 4"]


def test_agents_that_hand_back_and_forth_with_the_same_texts_stop_as_a_livelock():
    model = ScriptedModel(fn=lambda req: Transfer("b" if req.agent == "a" else "a", "yours"))
    r = Handoffs([model.agent("a", handoffs=["b"]), model.agent("b", handoffs=["a"])], max_turns=50).execute(TASK)
    assert_stop(r, "livelock")
    assert [m.role for m in r.transcript[1:]] == ["a", "b", "a", "b", "a", "b"]


def test_until_stops_after_the_turn_that_meets_it():
    model = ScriptedModel({"a": ["TERMINATE"]})
    r = Handoffs([model.agent("a", handoffs=["b"]), model.agent("b")],
                 until=lambda messages: "TERMINATE" in messages[-1].content).execute(TASK)
    assert_stop(r, "until")


def test_a_handoff_to_a_person_waits_and_goes_back_to_the_agent_that_handed_over():
    model = ScriptedModel({"tech": [Transfer("customer", "which router model?"), "Reset the X200 and retry."]})
    chat = Handoffs([model.agent("tech", handoffs=["customer"]), Human("customer")])
    store = MemoryCheckpointer()
    r = chat.execute("My internet is down.", checkpoint=store, run_id="t1")
    assert_stop(r, "interrupted")
    assert r.path == ["seed", "tech", "customer"]
    done = chat.resume("t1", store, input=Say("It is an X200."))
    assert_stop(done, "answered")
    assert [(m.role, m.content) for m in done.transcript[1:]] == [("tech", "which router model?"),
                                                                  ("customer", "It is an X200."),
                                                                  ("tech", "Reset the X200 and retry.")]
    assert model.calls("tech") == 2


def test_a_person_can_name_the_agent_that_goes_on():
    model = ScriptedModel({"triage": [Transfer("customer")], "billing": ["Your invoice is attached."]})
    chat = Handoffs([model.agent("triage", handoffs=["customer"]), model.agent("billing"), Human("customer")])
    store = MemoryCheckpointer()
    chat.execute(TASK, checkpoint=store, run_id="p1")
    done = chat.resume("p1", store, input=Say("@billing please send the invoice"))
    assert done.path[-3:] == ["customer", "billing", "stop"]
    assert (model.calls("triage"), model.calls("billing")) == (1, 1)


def test_the_receivers_view_is_what_the_handoffs_input_filter_keeps():
    def last_only(messages):
        return messages[-1:]

    model = ScriptedModel({"a": ["Some context.", Transfer("b", "over to you")], "b": ["ok"]})
    chat = Handoffs([model.agent("a", handoffs=[Handoff("b", input_filter=last_only)]), model.agent("b")],
                    on_reply="continue", max_turns=3)
    r = chat.execute(TASK)
    assert [m.role for m in r.transcript] == ["User", "a", "a", "b"]
    sent = model.requests_of("b")[0].messages
    assert [m["content"] for m in sent[:-1]] == ["a: over to you"]  # the filter's one message, then the prompt


def test_a_receiver_with_an_approval_gated_tool_waits_for_the_person_then_answers():
    def refund(order: int) -> str:
        """Refund an order."""
        return f"refunded order {order}"

    model = ScriptedModel({"triage": [Transfer("billing")],
                           "billing": [ToolCall("refund", {"order": 7}, id="r1"), "Refund done."]})
    billing = model.agent("billing", tools=[Tool(refund, approval=True)], handoffs=["triage"])
    chat = Handoffs([model.agent("triage", handoffs=["billing"]), billing])
    store = MemoryCheckpointer()
    r = chat.execute(TASK, checkpoint=store, run_id="r")
    assert_stop(r, "interrupted")
    assert r.pending.proposed["tool"] == "refund"
    from fsmchat import Approve
    done = chat.resume("r", store, input=Approve())
    assert_stop(done, "answered")
    assert done.transcript[-1].content == "Refund done."
    assert done.transcript[-1].tool_calls[0].result == "refunded order 7"
    assert_trace_is_path(chat.graph, done)


def test_the_offline_model_hands_off_by_what_the_targets_cover():
    triage = Agent("triage", system_prompt="You route customers.", handoffs=[
        Handoff("billing", description="Charges, invoices and refunds."),
        Handoff("tech", description="Technical problems: errors, crashes, outages.")])
    chat = Handoffs([triage, Agent("billing", system_prompt="You handle refunds."),
                     Agent("tech", system_prompt="You fix technical problems.")])
    r = chat.execute("I was charged twice and need a refund.")
    assert r.path == ["seed", "triage", "billing", "stop"]
    r = chat.execute("The app crashes with an error on start.")
    assert r.path == ["seed", "triage", "tech", "stop"]


def test_swarm_is_the_same_pattern_and_a_flow_step():
    assert Swarm is Handoffs
    model = ScriptedModel({"a": [Transfer("b")], "b": ["done"]})
    r = AgentFlow(steps=[Handoffs([model.agent("a", handoffs=["b"]), model.agent("b")])]).execute(TASK)
    assert r.error is None and r.stop_reason == "done"
    assert (model.calls("a"), model.calls("b")) == (1, 1)


def test_handoffs_in_a_config_round_trip():
    from fsmchat import from_config
    chat = Handoffs([Agent("a", handoffs=[Handoff("b", description="B does it.")]), Agent("b")], max_turns=4)
    again = from_config(chat.to_config())
    assert again.config.participants[0].handoffs == [Handoff("b", description="B does it.")]
    assert again.graph.to_dot() == chat.graph.to_dot()


# ---- bad input, before any model call ----
@pytest.mark.parametrize("build, message", [
    (lambda: Handoffs([Agent("a")]), "Handoffs needs at least two participants"),
    (lambda: Handoffs([Agent("a", handoffs=["ghost"]), Agent("b")]),
     "Handoffs: agent 'a' hands off to 'ghost', who is not a participant (participants: 'a', 'b'); add it, or drop "
     "the handoff"),
    (lambda: Agent("a", handoffs=["a"]), "Agent: handoffs: agent 'a' hands off to itself"),
    (lambda: Agent("a", handoffs=["b", "b"]), "Agent: handoffs: 'b' is listed twice"),
    (lambda: Agent("a", handoffs=[3]), "Agent: a handoff's target is an agent, a Human or a name (str), got 3"),
    (lambda: Handoffs([Agent("a", handoffs=["b"]), Agent("b"), Agent("c")]),
     "Handoffs: no handoff from 'a' ever reaches 'c'"),
    (lambda: Handoffs([Agent("a", handoffs=["b"]), Agent("b")], start="z"), "Handoffs: start='z' is not a participant"),
    (lambda: Handoffs([Agent("a", handoffs=["b"]), Agent("b")], on_reply="go"), "on_reply"),
    (lambda: Handoffs([Agent("a", handoffs=["b"]), Agent("b")], max_turns=0), "max_turns=0 is invalid"),
])
def test_bad_input_is_refused_naming_what_is_wrong(build, message):
    with pytest.raises(ConfigError) as exc:
        build()
    assert message in str(exc.value)


KILL_SCRIPT = textwrap.dedent('''
    import os, sys
    from fsmchat import Handoffs
    from fsmchat.store.checkpoint import SqliteCheckpointer
    from fsmchat.testing import FunctionModel, Transfer
    db, log = sys.argv[1], sys.argv[2]
    def answer(req):
        with open(log, "a") as f:
            f.write(f"{req.agent} {req.n}\\n")
        if req.agent == "triage":
            return Transfer("billing", "refund it")
        os.kill(os.getpid(), 9)  # the handoff is committed; the receiver's reply is never written
    m = FunctionModel(answer, id="kill-model")
    chat = Handoffs([m.agent("triage", handoffs=["billing"]), m.agent("billing")], factory=None)
    chat.execute("charged twice", checkpoint=SqliteCheckpointer(db), run_id="k")
''')


def test_a_sigkill_between_the_handoff_and_the_receivers_reply_resumes_with_the_receiver_once(tmp_path):
    script = tmp_path / "kill.py"
    script.write_text(KILL_SCRIPT.replace(", factory=None", ""))
    db, log = tmp_path / "k.db", tmp_path / "calls.log"
    proc = subprocess.run([sys.executable, str(script), str(db), str(log)], env={**os.environ}, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert log.read_text().split("\n")[:2] == ["triage 1", "billing 1"]
    from fsmchat.testing import FunctionModel
    m = FunctionModel(lambda req: f"{req.agent} answered", id="kill-model")
    chat = Handoffs([m.agent("triage", handoffs=["billing"]), m.agent("billing")])
    r = chat.resume("k", SqliteCheckpointer(str(db)))
    assert_stop(r, "answered")
    assert r.path == ["seed", "triage", "billing", "stop"]
    assert [(x.role, x.content) for x in r.transcript] == [("User", "charged twice"), ("triage", "refund it"),
                                                           ("billing", "billing answered")]
    assert (m.calls("triage"), m.calls("billing")) == (0, 1)


def test_pick_is_a_selector_script_item():
    assert Pick("b").name == "select_speaker"
