"""A two-round critic/author Discussion followed by a summarizer reading {{discussion_transcript}}."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import report  # noqa: E402

from fsmchat import Agent, AgentFlow, Discussion  # noqa: E402


TASK = "Draft: Renewable energy is the only path forward."


def build() -> AgentFlow:
    critic = Agent(name="critic", instructions="Critique the draft")
    author = Agent(name="author", instructions="Revise the draft")
    summarizer = Agent(name="summarizer", instructions="Summarize this debate:\n{{discussion_transcript}}")
    return AgentFlow(agents=[critic, author, summarizer], steps=[Discussion([critic, author], rounds=2), summarizer])


if __name__ == "__main__":
    report(build(), TASK)
