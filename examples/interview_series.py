"""InterviewSeries (swarms alternate_debates/interview_series.py) as an AgentFlow.

The interviewer I and the interviewee E are introduced (replies thrown away, kept in memory); then,
for each question q: I is asked "Ask this question: {q}", E answers I's question verbatim, and
``follow_up_depth`` times I is asked for a follow-up on E's *main* answer and E answers it.
Calls = 2 + 2Q(1 + D); posts = 2Q(1 + D), strictly I, E, I, E... (demo: Q = 3, D = 2: 20 calls).

Reference quirks kept: the task is sent to nobody and posted nowhere; every follow-up prompt quotes
the main answer, never the latest follow-up answer; replies travel raw as the next prompt; D <= 0
means no follow-ups; no questions (None or []) means the three built-in ones; the default output
(str-all-except-first) drops I's first question. Deviations: bad input (missing agent, unknown
output_type) is refused when the flow is built, before any call; the built-in questions are not
written back onto anything (there is no instance); memories are fresh for every run.

Runs offline by default; `fsmchat run examples/interview_series.py --model gpt-4o-mini` uses a real model.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import count, intro, report  # noqa: E402

from fsmchat import Agent, AgentFlow, Task, loop, repeat  # noqa: E402

TASK = "Hiring a senior backend engineer"
DEFAULT_QUESTIONS = ["Tell me about yourself.", "What are your main interests?", "What are your goals?"]


def interview_series(questions=None, interviewer=None, interviewee=None, follow_up_depth=2,
                     output_type="str-all-except-first") -> AgentFlow:
    if not interviewer or not interviewee:
        raise ValueError("Both interviewer and interviewee agents are required.")
    count("follow_up_depth", follow_up_depth, " (0 or less: no follow-ups)")
    if isinstance(questions, str) or not all(isinstance(q, str) for q in questions or []):
        raise TypeError(f"questions must be a list of strings, got {questions!r}")
    questions = list(questions or DEFAULT_QUESTIONS)
    i, e = interviewer, interviewee
    per_question = [Task(agent=i, action="Ask this question: {{question}}"), Task(agent=e, save_as="answer")]
    if follow_up_depth > 0:
        follow_up = [Task(agent=i, action="Based on the response '{{answer}}', ask a relevant follow-up question."),
                     Task(agent=e)]
        per_question.append(repeat(follow_up, max_iterations=follow_up_depth, name="follow_ups"))
    return AgentFlow(name="interview_series", memory=True, output_type=output_type, variables={"questions": questions},
                     steps=[intro(i, f"You are {i.name}, interviewing {e.name}. Ask thoughtful questions and "
                                     "follow up on the answers."),
                            intro(e, f"You are {e.name}, interviewed by {i.name}. Answer in detail and honestly."),
                            loop(per_question, over="questions", var_name="question", max_items=len(questions),
                                 name="questions")])


def build() -> AgentFlow:
    interviewer = Agent("Interviewer", system_prompt="You are a hiring manager who asks probing, fair questions.")
    candidate = Agent("Candidate", system_prompt="You are a backend engineer with ten years of experience.")
    return interview_series(
        ["What systems have you scaled?", "How do you handle an outage?", "Why this role?"],
        interviewer, candidate, follow_up_depth=2)


if __name__ == "__main__":
    report(build(), TASK)
