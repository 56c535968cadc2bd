"""The reference's AI-ethics debate as a bid-based GroupChat.

Runs offline by default (fsmchat's simulated model); `fsmchat run examples/group_chat.py
--model gpt-4o-mini` (or FSMCHAT_MODEL=...) uses a real model through litellm.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import show  # noqa: E402

from fsmchat import Agent, GroupChat  # noqa: E402

TASK = "Should we prioritize AI development or AI regulation?"


def build() -> GroupChat:
    tech_optimist = Agent(agent_name="TechOptimist", system_prompt="You argue for the benefits of AI in society.",
                          max_loops=1, persistent_memory=False)
    tech_critic = Agent(agent_name="TechCritic", system_prompt="You argue against unchecked AI advancement.",
                        max_loops=1, persistent_memory=False)
    realist = Agent(agent_name="Realist", system_prompt="You weigh both sides and seek a balanced view.",
                    max_loops=1, persistent_memory=False)
    return GroupChat(name="AI-Ethics-Debate", description="Discussion on AI's societal impact",
                     agents=[tech_optimist, tech_critic, realist], max_loops=8, threshold=0.5, recency_penalty=0.3,
                     output_type="str")


def main() -> None:
    show(build(), TASK)


if __name__ == "__main__":
    main()
