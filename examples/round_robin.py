"""The reference's RoundRobinSwarm example: an analyst, a strategist and an implementer take turns.

Runs offline by default (fsmchat's simulated model); `fsmchat run examples/round_robin.py
--model gpt-4o-mini` (or FSMCHAT_MODEL=...) uses a real model through litellm.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import show  # noqa: E402

from fsmchat import Agent  # noqa: E402
from fsmchat.patterns.round_robin import RoundRobinSwarm

TASK = "How should we approach building a new AI product?"


def build() -> RoundRobinSwarm:
    agents = [
        Agent(agent_name="Analyst", system_prompt="You are a data analyst. Analyze information critically.",
              max_loops=1),
        Agent(agent_name="Strategist", system_prompt="You are a strategist. Think about long-term implications.",
              max_loops=1),
        Agent(agent_name="Implementer", system_prompt="You are an implementer. Focus on practical execution.",
              max_loops=1),
    ]
    return RoundRobinSwarm(agents=agents, max_loops=2, output_type="str")


def main() -> None:
    show(build(), TASK)


if __name__ == "__main__":
    main()
