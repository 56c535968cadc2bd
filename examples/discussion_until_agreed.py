"""PraisonAI's critic/author Discussion that stops as soon as a turn says AGREED."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import report  # noqa: E402

from fsmchat import Agent, AgentFlow, Discussion  # noqa: E402


TASK = "Draft: Renewable energy is the only path forward."


def build() -> AgentFlow:
    critic = Agent(name="critic", instructions="Critique the draft rigorously")
    author = Agent(name="author", instructions="Revise the draft; say AGREED when satisfied")
    return AgentFlow(agents=[critic, author], steps=[
        Discussion([critic, author], rounds=3, until=lambda ctx: "AGREED" in (ctx.previous_result or ""))])


if __name__ == "__main__":
    report(build(), TASK)
