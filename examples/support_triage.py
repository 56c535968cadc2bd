"""Support triage with handoffs: triage hands the customer to billing or tech; billing has a
refund tool a person must approve; tech can hand back to triage or ask the customer.

Each agent's `handoffs=[...]` are offered as `transfer_to_<name>` tools; a call ends its turn and
the target is active (OpenAI's Swarm / Agents SDK, AutoGen's Swarm, langgraph-swarm). The graph
draws every possible handoff as an edge; a run's path shows the ones taken. A reply without a
handoff ends the run ("answered"). A handoff to the customer (a `Human`) waits for their answer,
then the agent that handed over goes on. `refund` waits for a person's approval: a terminal asks
you; run any other way (the tests, `make demo`) a scripted approver approves. Offline by default:
the offline model hands off to the target whose description the request matches.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import task  # noqa: E402

from fsmchat import Agent, Approve, Handoff, Handoffs, Human, MemoryCheckpointer, Say, Tool  # noqa: E402

TASK = "I was charged twice for order 1042 and need a refund."


def refund(order: int) -> str:
    """Refund an order's duplicate charge."""
    return f"refund issued for order {order}"


def build() -> Handoffs:
    triage = Agent("triage", system_prompt="You greet customers and route them to the right team.", handoffs=[
        Handoff("billing", description="Charges, invoices, payments and refunds."),
        Handoff("tech", description="Technical problems: errors, crashes, outages, login.")])
    billing = Agent("billing", system_prompt="You resolve charges and refunds for orders.",
                    tools=[Tool(refund, approval=True)], handoffs=["triage"])
    tech = Agent("tech", system_prompt="You fix technical problems step by step.", handoffs=[
        Handoff("triage", description="Questions about money or accounts."),
        Handoff("customer", description="Ask the customer for a detail you need, such as a device model.")])
    return Handoffs([triage, billing, tech, Human("customer")], name="Support-Triage", max_turns=8,
                    description="Triage hands customers to billing or tech; refunds need a person's approval")


def answer_for(pending) -> object:
    """A person's answer when nobody is at a terminal: approve a tool call, answer a question."""
    if pending.kind == "tool_call":
        return Approve()
    return Say("It is an X200 router.")


def main() -> None:
    support = build()
    checkpoint = MemoryCheckpointer()  # a SqliteCheckpointer("runs.db") lets the answer come days later
    result = support.execute(task(TASK), checkpoint=checkpoint)
    while result.waiting:
        if sys.stdin.isatty():
            from fsmchat.cli import ask_terminal

            answer = ask_terminal(result.pending)
            if answer is None:
                break
        else:
            answer = answer_for(result.pending)
        print(f"[{result.pending.kind}] {result.pending.prompt} -> {answer!r}")
        result = support.resume(result.run_id, checkpoint, input=answer)
    if result.error is not None:
        raise result.error
    for m in result.transcript[1:]:
        print(f"{m.role}: {m.content}")
    handoffs = [f"{e['from']} -> {e['to']}" for e in result.events if e["event"] == "handoff"]
    print(f"\n-- stopped: {result.stop_reason}; handoffs: {', '.join(handoffs) or 'none'}; {result.calls} model "
          f"calls; path: {' -> '.join(result.path)}")


if __name__ == "__main__":
    main()
