"""The offline model calls a tool, deterministically, when what it is asked for is what the tool's
name or description offers; once per turn; never when told not to; its reply then says what the
tools gave."""
import json
import os
import subprocess
import sys
from pathlib import Path

from fsmchat import Agent, GroupChat, RoundRobinSwarm
from fsmchat.speakers.offline import offline_tool_calls, offline_tool_results

ROOT = Path(__file__).resolve().parents[2]


def spec(name, description, **props):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": props, "required": list(props)}}}


CALC = spec("calculate", "Calculate an arithmetic expression.", expression={"type": "string"})
LOOKUP = spec("population", "The population of a city.", city={"type": "string"})
ASK = [{"role": "system", "content": "You plan."},
       {"role": "user", "content": "Calculate 12 * 40 + 2 and tell me the population of Oslo."}]


def test_it_calls_each_tool_the_request_asks_for_with_arguments_read_from_it():
    calls = offline_tool_calls(ASK, {"tools": [CALC, LOOKUP], "tool_choice": "auto"})
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == \
        [("calculate", {"expression": "12 * 40 + 2"}), ("population", {"city": "Oslo"})]
    assert calls == offline_tool_calls(ASK, {"tools": [CALC, LOOKUP], "tool_choice": "auto"})  # deterministic


def test_it_calls_nothing_unasked_after_results_or_when_told_not_to():
    plain = [{"role": "user", "content": "What should we eat tonight?"}]
    assert offline_tool_calls(plain, {"tools": [CALC, LOOKUP]}) == []
    assert offline_tool_calls(ASK, {"tools": [CALC], "tool_choice": "none"}) == []
    assert offline_tool_calls(ASK, {"tools": [CALC], "tool_choice": {"type": "function",
                                                                    "function": {"name": "respond"}}}) == []
    done = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "calculate", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "482"}]
    assert offline_tool_calls(done, {"tools": [CALC]}) == []
    assert offline_tool_results(done) == " My tools say: calculate gave 482."


def test_a_short_tool_name_or_a_parameter_name_asks_for_the_tool_with_the_numbers_in_order():
    add = spec("add", "Add two integers.", a={"type": "integer"}, b={"type": "integer"})
    calls = offline_tool_calls([{"role": "user", "content": "Add 2 and 3 please"}], {"tools": [add]})
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [("add", {"a": 2, "b": 3})]
    convert = spec("convert", "Change units.", celsius={"type": "number"})
    calls = offline_tool_calls([{"role": "user", "content": "What is 21.5 celsius in F?"}], {"tools": [convert]})
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"celsius": 21.5}]
    assert offline_tool_calls([{"role": "user", "content": "Let's get started on the address book"}],
                              {"tools": [add]}) == []  # "address" is not "add": short parts match whole words


def calculate(expression: str) -> str:
    """Calculate an arithmetic expression.

    Args:
        expression: The arithmetic.
    """
    a, op, b = expression.split()[:3]
    return str(int(a) * int(b)) if op == "*" else "?"


def test_an_offline_run_uses_a_tool_and_says_what_it_gave():
    swarm = RoundRobinSwarm(agents=[Agent("Analyst", system_prompt="You analyze costs.", tools=[calculate]),
                                    Agent("Critic", system_prompt="You question assumptions.")])
    r = swarm.execute("Calculate 12 * 40 for the budget.")
    assert r.ok and r.path == ["seed", "Analyst", "tools_Analyst", "Analyst", "Critic", "stop"]
    (call,) = r.transcript[1].tool_calls
    assert (call.name, call.arguments, call.result) == ("calculate", {"expression": "12 * 40"}, "480")
    assert r.transcript[1].content.endswith(" My tools say: calculate gave 480.")
    again = swarm.execute("Calculate 12 * 40 for the budget.")
    assert [m.content for m in again.transcript] == [m.content for m in r.transcript]


def test_an_offline_bidder_calls_its_tool_before_it_bids():
    chat = GroupChat(agents=[Agent("Analyst", system_prompt="You analyze costs.", tools=[calculate]),
                             Agent("Critic", system_prompt="You question assumptions.")], max_loops=2)
    r = chat.execute("Calculate 12 * 40 for the budget.")
    assert r.ok and r.path[:4] == ["seed", "bid", "tools_bid", "bid"]
    assert [e["agent"] for e in r.events if e["event"] == "bid_tools"] == ["Analyst"]


def test_the_tools_example_runs_offline_and_asks_for_its_approval():
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "tools.py")], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("[approval] Chair asks to call publish_decision(summary=")
    assert "    tool calculate({'expression': '120 * 8 * 4'}) -> 3840 [done]" in lines
    assert "    tool find_study({'topic': 'pilot'}) -> the 2024 pilot study found output held steady and sick days " \
           "fell by a third [done]" in lines
    assert lines[-1].startswith("-- stopped: done; published: ['Should our 120-person team try a four-day week?']")


def test_a_patterns_own_instruction_never_asks_the_offline_model_for_a_tool():
    """The round robin's turn prompt says "Add your own perspective": the offline model calls a tool
    named ``add`` only when the task asks for it."""
    from fsmchat import Agent, RoundRobinSwarm

    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    poem = RoundRobinSwarm(agents=[Agent("Poet", system_prompt="You write.", tools=[add])], max_loops=1)
    assert [m.tool_calls for m in poem.execute("Write a haiku about the sea").transcript[1:]] == [[]]
    calc = RoundRobinSwarm(agents=[Agent("Calc", system_prompt="You add.", tools=[add])], max_loops=1)
    assert [c.result for m in calc.execute("Add 2 and 3 please").transcript[1:] for c in m.tool_calls] == ["5"]
