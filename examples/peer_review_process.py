"""PeerReviewProcess (swarms alternate_debates/peer_review_process.py) as an AgentFlow.

The author A, then each reviewer, is introduced (replies thrown away, kept in memory). Each round
every reviewer, in list order, is asked to review the current work s (the task in round 1) and
sees no other review; then A is asked to respond to this round's N reviews, given as the Python
list of their texts (C6: `{{transcript[-N:]}}`), and A's response becomes the next round's work.
Calls = 1 + N + R(N + 1); posts = R(N + 1), ordered R1..RN, A (demo: N = 2, R = 2: 9 calls).

Reference quirks kept: one reviewer is enough (N >= 1; with N = 1 the "other reviewers" list is
empty); the author never receives the work under review (only the reviews); the next "work" is
the author's response, not a revised submission; prompts carry no round number; review_rounds
<= 0 runs only the introductions and the output is ""; the default output (str-all-except-first)
drops Reviewer 1's first review. Deviations: bad input is refused when the flow is built, before
any call; memories are fresh for every run. The reviews are independent, so `parallel(...)` would
give the same result; they run in sequence here, as in the reference.

Runs offline by default; `fsmchat run examples/peer_review_process.py --model gpt-4o-mini` uses a real model.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import count, intro, report  # noqa: E402

from fsmchat import Agent, AgentFlow, Task, flow_input, loop  # noqa: E402

TASK = "Paper: a lock-free queue that is 3x faster than the state of the art on 64 cores."


def peer_review_process(reviewers=None, author=None, review_rounds=2, output_type="str-all-except-first") -> AgentFlow:
    if not reviewers:
        raise ValueError("At least one reviewer is required.")
    if not author:
        raise ValueError("An author agent is required for peer review.")
    count("review_rounds", review_rounds)
    names = ", ".join(r.name for r in reviewers)
    intros = [intro(author, f"You are {author.name}, the author. Reviewers: {names}. Author: {author.name}. "
                            "Respond to the reviews professionally.")]
    for k, r in enumerate(reviewers, 1):
        others = ", ".join(x.name for x in reviewers if x is not r)
        intros.append(intro(r, f"You are {r.name}, Reviewer {k}. Other reviewers: {others}. Author: {author.name}. "
                               "Review the work thoroughly and constructively."))
    reviews = [Task(agent=r, action=f"Reviewer {r.name}, please review this work: " + "{{work}}") for r in reviewers]
    response = Task(agent=author, save_as="work", action=f"Author {author.name}, please respond to these reviews: "
                    + "{{transcript[-%d:]}}" % len(reviewers))
    rounds = list(range(1, review_rounds + 1))
    return AgentFlow(name="peer_review_process", memory=True, output_type=output_type, variables={"rounds": rounds},
                     steps=[*intros, Task(handler=flow_input, name="work_is_the_task", post=False, save_as="work"),
                            loop([*reviews, response], over="rounds", var_name="round", max_items=len(rounds),
                                 name="review_rounds")])


def build() -> AgentFlow:
    methods = Agent("Methods_Reviewer", system_prompt="You review experimental methods and benchmarks.")
    theory = Agent("Theory_Reviewer", system_prompt="You review correctness proofs and memory-model arguments.")
    author = Agent("Author", system_prompt="You are the paper's author, precise and open to criticism.")
    return peer_review_process([methods, theory], author, review_rounds=2)


if __name__ == "__main__":
    report(build(), TASK)
