"""swarms' NegotiationSession (alternate_debates/negotiation_session.py) as an AgentFlow: a
mediator and N >= 2 parties; each round the mediator opens on the terms, the parties present
positions (fan-out), each responds to the same snapshot of all positions (fan-out), optionally
each considers a concession (fan-out), and the mediator's summary becomes the next terms.
Calls = 1 + N + R(2 + 2N + C*N); defaults (R = 5, N = 2) 43, the demo (R = 2, N = 2) 19.

Reproduced quirks: the mediator never receives a party's text (its summary prompt is constant;
it writes from its own memory). The "other positions" list holds the party's own position too,
and later parties do not see earlier responses. Concessions are a constant prompt, answered from
the party's own memory. The mediator's round opener is recorded but given to nobody.
Deviations: bad input is refused when the flow is built (same messages), not at run(); the task
must be non-empty; `include_concessions` decides which steps exist (it is fixed when the flow is
built), so max_calls() is exact; memories last one run. Each sweep is a fan-out run one branch at
a time (`max_concurrency=1`: the reference's call order; its calls are independent).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import count, intro, report  # noqa: E402

from fsmchat import Agent, AgentFlow, Task, flow_input, loop, parallel  # noqa: E402

T, LIST = "{{terms}}", "{{parallel_outputs}}"  # the carried terms; the last fan-out's replies

TASK = "A new two-year wage agreement for the warehouse staff."  # `fsmchat run` runs it (--task replaces it)


def negotiation_session(parties=None, mediator=None, negotiation_rounds=5, include_concessions=True,
                        output_type="str-all-except-first") -> AgentFlow:
    if not parties or len(parties) < 2:
        raise ValueError("At least two parties are required for negotiation.")
    if not mediator:
        raise ValueError("A mediator agent is required for negotiation session.")
    count("negotiation_rounds", negotiation_rounds)
    parties = list(parties)
    names = ", ".join(p.name for p in parties)
    setup = [intro(mediator, f"You are {mediator.name}, the mediator. Negotiating parties: {names}. Mediator: "
                             f"{mediator.name}. Help the parties reach an agreement.")]
    setup += [intro(p, f"You are {p.name}, Party {i}. Other parties: "
                       f"{', '.join(o.name for o in parties if o is not p)}. Mediator: {mediator.name}. State your "
                       "position clearly and be willing to compromise.") for i, p in enumerate(parties, 1)]

    def sweep(prompt: str, name: str):
        return parallel([Task(agent=p, action=f"Party {p.name}, {prompt}") for p in parties], name=name,
                        max_concurrency=1)

    concessions = [sweep("consider making a concession based on the discussion.", "concessions")]
    negotiation = [Task(agent=mediator, action=f"Negotiation Round {{{{round}}}}: {T}"),
                   sweep(f"present your position on: {T}", "positions"),
                   sweep(f"respond to the other positions: {LIST}", "responses"),
                   *(concessions if include_concessions else []),
                   Task(agent=mediator, action="Summarize the round and propose next steps for agreement.",
                        save_as="terms")]
    return AgentFlow(name="negotiation_session", memory=True, output_type=output_type,
                     steps=[*setup, Task(handler=flow_input, name="terms_are_task", post=False, save_as="terms"),
                            loop(negotiation, over=list(range(1, negotiation_rounds + 1)), var_name="round",
                                 name="rounds")])


def build() -> AgentFlow:
    mediator = Agent(agent_name="Mediator", system_prompt="You mediate labour negotiations, neutral and concrete.")
    union = Agent(agent_name="Union", system_prompt="You represent the workers: pay, hours, safety.")
    company = Agent(agent_name="Company", system_prompt="You represent management: costs and competitiveness.")
    return negotiation_session([union, company], mediator, negotiation_rounds=2)


if __name__ == "__main__":
    report(build(), TASK)
