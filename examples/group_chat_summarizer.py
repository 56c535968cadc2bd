"""A GroupChat as a flow step, then a summarizer reading the chat's output (the previous output)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import report  # noqa: E402

from fsmchat import Agent, AgentFlow, GroupChat  # noqa: E402


TASK = "Should a small team adopt a four-day work week?"


def build() -> AgentFlow:
    chat = GroupChat(agents=[Agent("Economist", system_prompt="You weigh costs and output."),
                             Agent("Psychologist", system_prompt="You weigh wellbeing and focus."),
                             Agent("Manager", system_prompt="You weigh scheduling and clients.")], max_loops=6)
    summarizer = Agent(name="summarizer", instructions="Summarize this group chat in three bullet points.")
    return AgentFlow(steps=[chat, summarizer])


if __name__ == "__main__":
    report(build(), TASK)
