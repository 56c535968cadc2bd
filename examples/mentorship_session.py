"""swarms' MentorshipSession (alternate_debates/mentorship_session.py) as an AgentFlow: mentor
and mentee, S sessions; each session the mentor opens on the goal, the mentee reports progress,
the mentor guides on that report, optionally the mentee asks for feedback and the mentor gives
it, and the mentor sets the next goal. Calls = 2 + S(4 + 2F): 20 with the defaults, 14 in the
demo (S = 2, with feedback), 2 + 4S without feedback.

Reproduced quirks: the mentee's only input from the mentor is the goal (never the guidance or
the feedback); "Ask for specific feedback" and "Set the goal for the next session based on this
discussion." are constant prompts answered from the speaker's own memory; the mentor's opener,
guidance and feedback are recorded but given to nobody; the mentor posts two and three times in
a row (the flow records consecutive turns by one speaker as they come).
Deviations: bad input is refused when the flow is built (same message), not at run(); an empty
task is refused (the reference substitutes "Professional development and skill improvement");
`include_feedback` decides which steps exist (fixed when built), so max_calls() is exact;
memories last one run.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import count, intro, report  # noqa: E402

from fsmchat import Agent, AgentFlow, Task, flow_input, loop  # noqa: E402

G, PREV = "{{goal}}", "{{previous_output}}"  # the carried goal; the step before's reply

TASK = "Become confident at reviewing pull requests."  # `fsmchat run` runs it (--task replaces it)


def mentorship_session(mentor=None, mentee=None, session_count=3, include_feedback=True,
                       output_type="str-all-except-first") -> AgentFlow:
    if not mentor or not mentee:
        raise ValueError("Both mentor and mentee agents are required.")
    count("session_count", session_count)
    setup = [intro(mentor, f"You are {mentor.name}, mentoring {mentee.name}. Give guidance, support and "
                           "constructive feedback."),
             intro(mentee, f"You are {mentee.name}, mentored by {mentor.name}. Ask questions, share your progress "
                           "and be open to feedback.")]
    feedback = [Task(agent=mentee, action="Ask for specific feedback on your progress"),
                Task(agent=mentor, action=f"Provide detailed feedback on: {PREV}")]
    session = [Task(agent=mentor, action=f"Session {{{{session}}}}: Let's work on {G}"),
               Task(agent=mentee, action=f"Mentee {mentee.name}, share your progress and ask questions about: {G}"),
               Task(agent=mentor, action=f"Mentor {mentor.name}, provide guidance based on: {PREV}"),
               *(feedback if include_feedback else []),
               Task(agent=mentor, action="Set the goal for the next session based on this discussion.",
                    save_as="goal")]
    return AgentFlow(name="mentorship_session", memory=True, output_type=output_type,
                     steps=[*setup, Task(handler=flow_input, name="goal_is_task", post=False, save_as="goal"),
                            loop(session, over=list(range(1, session_count + 1)), var_name="session",
                                 name="sessions")])


def build() -> AgentFlow:
    mentor = Agent(agent_name="Mentor", system_prompt="You are a senior engineer mentoring with patience and rigour.")
    mentee = Agent(agent_name="Mentee", system_prompt="You are a junior engineer, eager and honest about gaps.")
    return mentorship_session(mentor, mentee, session_count=2)


if __name__ == "__main__":
    report(build(), TASK)
