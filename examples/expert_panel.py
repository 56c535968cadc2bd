"""The reference's healthcare/AGI-ethics panel: a moderator and three experts, two rounds.

Runs offline by default (fsmchat's simulated model); `fsmchat run examples/expert_panel.py
--model gpt-4o-mini` (or FSMCHAT_MODEL=...) uses a real model through litellm.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import show  # noqa: E402

from fsmchat import Agent  # noqa: E402
from fsmchat.patterns.panel import ExpertPanelDiscussion

TASK = "What are the ethical implications of AGI development?"


def build() -> ExpertPanelDiscussion:
    moderator = Agent(agent_name="Moderator", output_type="final",
                      system_prompt="You are a moderator who keeps the panel focused and fair.")
    expert1 = Agent(agent_name="AI_Expert", output_type="final",
                    system_prompt="You are an AI researcher focused on capabilities and safety.")
    expert2 = Agent(agent_name="Ethics_Expert", output_type="final",
                    system_prompt="You are an ethicist focused on fairness, consent and accountability.")
    expert3 = Agent(agent_name="Neuroscience_Expert", output_type="final",
                    system_prompt="You are a neuroscientist focused on minds, brains and consciousness.")
    return ExpertPanelDiscussion(max_rounds=2, agents=[expert1, expert2, expert3], moderator=moderator,
                                 output_type="str")


def main() -> None:
    show(build(), TASK)


if __name__ == "__main__":
    main()
