"""A Discussion nested in a loop over drafts: each draft gets its own two-round discussion."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import report  # noqa: E402

from fsmchat import Agent, AgentFlow, Discussion, loop  # noqa: E402


TASK = "Refine each draft"


def build() -> AgentFlow:
    critic = Agent(name="critic", instructions="Critique this item: {{item}}")
    author = Agent(name="author", instructions="Revise this item: {{item}}")
    drafts = ["draft A", "draft B"]
    return AgentFlow(agents=[critic, author],
                     steps=[loop(steps=[Discussion([critic, author], rounds=2)], over="items", max_items=len(drafts))],
                     variables={"items": drafts})


if __name__ == "__main__":
    report(build(), TASK)
