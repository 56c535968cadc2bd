"""BrainstormingSession (swarms alternate_debates/brainstorming_session.py) as an AgentFlow.

The facilitator F, then each participant, is introduced (replies thrown away, kept in memory).
Each round r: F opens "Round {r}: Let's brainstorm about {problem}" (the task in round 1); each
participant in list order either builds on `ideas[-3:]` (when build_on_ideas and some idea
exists) or suggests ideas for the problem, and its idea is appended to `ideas`, the run's
accumulator; then F synthesises this round's N ideas, given as the Python list of their texts
(C6: `{{transcript[-N:]}}`), and its reframing is the next round's problem.
Calls = 1 + N + R(N + 2) whatever the flag; posts = R(N + 2), ordered F, P1..PN, F (demo: N = 3,
R = 2: 14 calls).

Reference quirks kept: the window holds the last 3 participant ideas of the whole run (fixed at 3,
across rounds, never F's messages), so with build_on_ideas only P1 in round 1 sees the task and
from round 2 on F's reframing reaches only F's own next opening; F's openings are dead ends; the
flag changes prompts, never counts; idea_rounds <= 0 runs only the introductions and the output is
""; the default output (str-all-except-first) drops F's first opening. Deviations: bad input is
refused when the flow is built, before any call; memories are fresh for every run.

Runs offline by default; `fsmchat run examples/brainstorming_session.py --model gpt-4o-mini` uses a real model.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import count, intro, report  # noqa: E402

from fsmchat import Agent, AgentFlow, Task, flow_input, if_, loop  # noqa: E402

TASK = "How can a small city cut traffic deaths to zero?"


def brainstorming_session(participants=None, facilitator=None, idea_rounds=3, build_on_ideas=True,
                          output_type="str-all-except-first") -> AgentFlow:
    if not participants or len(participants) < 2:
        raise ValueError("At least two participants are required for brainstorming.")
    if not facilitator:
        raise ValueError("A facilitator agent is required for brainstorming session.")
    count("idea_rounds", idea_rounds)
    f, names = facilitator, ", ".join(p.name for p in participants)
    intros = [intro(f, f"You are {f.name}, facilitating a brainstorm. Brainstorming participants: {names}. "
                       f"Facilitator: {f.name}. Keep ideas flowing and synthesise them.")]
    turns = []
    for k, p in enumerate(participants, 1):
        others = ", ".join(x.name for x in participants if x is not p)
        intros.append(intro(p, f"You are {p.name}, Participant {k} in a brainstorm. Other participants: {others}. "
                               f"Facilitator: {f.name}. Build on the others' suggestions."))
        suggest = Task(agent=p, append_to="ideas", action=f"Participant {p.name}, suggest ideas for: " + "{{problem}}")
        build = Task(agent=p, append_to="ideas",
                     action=f"Participant {p.name}, build on these previous ideas: " + "{{ideas[-3:]}}")
        turns.append(if_("{{ideas}}", build, suggest, name=f"{p.name}_turn") if build_on_ideas else suggest)
    round_ = [Task(agent=f, action="Round {{round}}: Let's brainstorm about {{problem}}"), *turns,
              Task(agent=f, save_as="problem", action="Synthesize the ideas from this round and reframe the problem: "
                   + "{{transcript[-%d:]}}" % len(participants))]
    rounds = list(range(1, idea_rounds + 1))
    return AgentFlow(name="brainstorming_session", memory=True, output_type=output_type,
                     variables={"rounds": rounds, "ideas": []},
                     steps=[*intros, Task(handler=flow_input, name="problem_is_task", post=False, save_as="problem"),
                            loop(round_, over="rounds", var_name="round", max_items=len(rounds), name="idea_rounds")])


def build() -> AgentFlow:
    engineer = Agent("Traffic_Engineer", system_prompt="You design streets, crossings and signal timing.")
    planner = Agent("Urban_Planner", system_prompt="You plan land use, transit and walkable neighbourhoods.")
    advocate = Agent("Safety_Advocate", system_prompt="You speak for pedestrians, cyclists and crash victims.")
    facilitator = Agent("Facilitator", system_prompt="You facilitate creative workshops and keep them on track.")
    return brainstorming_session([engineer, planner, advocate], facilitator, idea_rounds=2)


if __name__ == "__main__":
    report(build(), TASK)
