"""MediationSession (swarms alternate_debates/mediation_session.py) as an AgentFlow.

The mediator M, then each party, is introduced (replies thrown away, kept in memory). Each session
s: M opens "Session {s}: Let's address {d}" (d is the task in session 1), every party in list order
shares its perspective on M's *opening reply* (not on d, and without the other parties' replies),
then M is asked to propose a resolution from this session's N perspectives, given as the Python
list of their texts (C6: `{{transcript[-N:]}}`); the proposal is the next session's dispute.
Calls = 1 + N + R(N + 2); posts = R(N + 2), ordered M, P1..PN, M (demo: N = 2, R = 2: 11 calls).
The same shape and count as ExpertPanelDiscussion, with an unlabelled list as the fan-in.

Reference quirks kept: the openings reach the parties and the transcript only; max_sessions <= 0
runs only the introductions and the output is ""; the default output (str-all-except-first) drops
M's first opening. Deviations: bad input is refused when the flow is built, before any call;
memories are fresh for every run.

Runs offline by default; `fsmchat run examples/mediation_session.py --model gpt-4o-mini` uses a real model.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import count, intro, report  # noqa: E402

from fsmchat import Agent, AgentFlow, Task, flow_input, loop  # noqa: E402

TASK = "Two teams both claim the only GPU cluster for the next quarter."


def mediation_session(parties=None, mediator=None, max_sessions=3, output_type="str-all-except-first") -> AgentFlow:
    if not parties or len(parties) < 2:
        raise ValueError("At least two parties are required for mediation.")
    if not mediator:
        raise ValueError("A mediator agent is required for mediation session.")
    count("max_sessions", max_sessions)
    m, names = mediator, ", ".join(p.name for p in parties)
    intros = [intro(m, f"You are {m.name}, a neutral mediator. Disputing parties: {names}. Mediator: {m.name}. "
                       "Help them reach a fair resolution.")]
    for k, p in enumerate(parties, 1):
        others = ", ".join(x.name for x in parties if x is not p)
        intros.append(intro(p, f"You are {p.name}, Party {k} in a mediation. Other parties: {others}. "
                               f"Mediator: {m.name}. Present your interests and stay open to solutions."))
    session = [Task(agent=m, save_as="opening",
                    action="Session {{session}}: Let's address {{dispute}}"),
               *[Task(agent=p, action=f"Party {p.name}, please share your perspective on: " + "{{opening}}")
                 for p in parties],
               Task(agent=m, save_as="dispute",
                    action="Based on these perspectives {{transcript[-%d:]}}, propose a resolution approach."
                           % len(parties))]
    sessions = list(range(1, max_sessions + 1))
    return AgentFlow(name="mediation_session", memory=True, output_type=output_type, variables={"sessions": sessions},
                     steps=[*intros, Task(handler=flow_input, name="dispute_is_task", post=False, save_as="dispute"),
                            loop(session, over="sessions", var_name="session", max_items=len(sessions),
                                 name="sessions")])


def build() -> AgentFlow:
    research = Agent("Research_Team", system_prompt="You lead a research team that needs GPUs for a paper deadline.")
    product = Agent("Product_Team", system_prompt="You lead a product team that needs GPUs to ship a launch.")
    mediator = Agent("Mediator", system_prompt="You are an experienced, impartial workplace mediator.")
    return mediation_session([research, product], mediator, max_sessions=2)


if __name__ == "__main__":
    report(build(), TASK)
