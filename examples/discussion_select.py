"""A Discussion with a custom speaker selector: the expert opens each pair of turns."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import report  # noqa: E402

from fsmchat import Agent, AgentFlow, Discussion  # noqa: E402


TASK = "Explain vector databases"


def build() -> AgentFlow:
    expert = Agent(name="expert", instructions="Answer with authority")
    scribe = Agent(name="scribe", instructions="Summarize the last answer")
    return AgentFlow(agents=[expert, scribe], steps=[
        Discussion([expert, scribe], rounds=2, select=lambda turn, ctx: expert if turn % 2 == 0 else scribe)])


if __name__ == "__main__":
    report(build(), TASK)
