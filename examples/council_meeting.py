"""swarms' CouncilMeeting (alternate_debates/council_meeting.py) as an AgentFlow: a chair and
N >= 2 members; each round the chair opens, the members discuss (fan-out), the chair calls a vote
on the discussions (fan-in), the members vote (fan-out), the chair announces the result (fan-in),
which is the next round's proposal. Calls = 1 + N + R(2N + 3); the demo (N = 3, R = 1) makes 13.

Reproduced quirks: `require_consensus` is accepted, kept (``flow.variables``) and never read: no
tally, no branch, no extra round. Members vote on a constant prompt, with only their own memory.
The chair's opener and its call for a vote are recorded but given to nobody. The first recorded
row (the chair's first opener) is dropped by the default output.
Deviations: bad input is refused when the flow is built (same messages), not at run(); the task
must be non-empty; memories last one run. Each sweep is a fan-out run one branch at a time
(`max_concurrency=1`: the reference's call order; the calls are independent, so dropping it runs
them concurrently with the same records).
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import count, intro, report  # noqa: E402

from fsmchat import Agent, AgentFlow, Task, flow_input, loop, parallel  # noqa: E402

P, LIST = "{{proposal}}", "{{parallel_outputs}}"  # the carried proposal; the last fan-out's replies

TASK = "Proposal: fund a new light-rail line with a 0.5% sales tax."  # `fsmchat run` runs it (--task replaces it)


def council_meeting(council_members=None, chairperson=None, voting_rounds=1, require_consensus=False,
                    output_type="str-all-except-first") -> AgentFlow:
    if not council_members or len(council_members) < 2:
        raise ValueError("At least two council members are required.")
    if not chairperson:
        raise ValueError("A chairperson agent is required for council meeting.")
    count("voting_rounds", voting_rounds)
    chair, members = chairperson, list(council_members)
    names = ", ".join(m.name for m in members)
    setup = [intro(chair, f"You are {chair.name}, the chairperson. Council members: {names}. Chairperson: "
                          f"{chair.name}. Lead the discussion and the votes.")]
    setup += [intro(m, f"You are {m.name}, Council Member {i}. Other members: "
                       f"{', '.join(o.name for o in members if o is not m)}. Chairperson: {chair.name}. "
                       "You will discuss proposals and vote on them.") for i, m in enumerate(members, 1)]
    meeting = [
        Task(agent=chair, action=f"Council Meeting Round {{{{round}}}}: {P}"),
        parallel([Task(agent=m, action=f"Council Member {m.name}, discuss this proposal: {P}") for m in members],
                 name="discuss", max_concurrency=1),
        Task(agent=chair, action=f"Based on these discussions {LIST}, call for a vote on the proposal."),
        parallel([Task(agent=m, action=f"Council Member {m.name}, vote on the proposal (approve/reject/abstain).")
                  for m in members], name="vote", max_concurrency=1),
        Task(agent=chair, action=f"Announce the voting result based on: {LIST}", save_as="proposal")]
    return AgentFlow(name="council_meeting", memory=True, output_type=output_type,
                     variables={"require_consensus": require_consensus},
                     steps=[*setup, Task(handler=flow_input, name="proposal_is_task", post=False, save_as="proposal"),
                            loop(meeting, over=list(range(1, voting_rounds + 1)), var_name="round", name="rounds")])


def build() -> AgentFlow:
    chair = Agent(agent_name="Chairperson", system_prompt="You chair a city council: fair, brief, procedural.")
    members = [Agent(agent_name=n, system_prompt=p) for n, p in [
        ("Budget_Member", "You guard the city budget."), ("Transit_Member", "You champion public transport."),
        ("Housing_Member", "You push for affordable housing.")]]
    return council_meeting(members, chair, voting_rounds=1)


if __name__ == "__main__":
    report(build(), TASK)
