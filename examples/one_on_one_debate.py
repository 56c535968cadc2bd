"""The reference's two debate examples: `OneOnOneDebate` (two philosophers, with introductions)
and the `one_on_one_debate` function (an optimist and a skeptic, replies only).

Runs offline by default (fsmchat's simulated model); `fsmchat run examples/one_on_one_debate.py
--model gpt-4o-mini` (or FSMCHAT_MODEL=...) uses a real model through litellm.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import show  # noqa: E402

from fsmchat import Agent  # noqa: E402
from fsmchat.patterns.debate import OneOnOneDebate, one_on_one_debate

TASK = "Is artificial intelligence consciousness possible?"
FUNCTION_TASK = "Will open-weight models match frontier models within two years?"


def build() -> OneOnOneDebate:
    philosopher1 = Agent(agent_name="Philosopher1", output_type="final",
                         system_prompt="You are a philosopher who argues machine consciousness is possible.")
    philosopher2 = Agent(agent_name="Philosopher2", output_type="final",
                         system_prompt="You are a philosopher who doubts machines can be conscious.")
    return OneOnOneDebate(max_loops=3, agents=[philosopher1, philosopher2], output_type="str")


def main() -> None:
    show(build(), TASK)
    print()

    optimist = Agent(agent_name="Optimist", system_prompt="You are an optimist about open-weight AI models.")
    skeptic = Agent(agent_name="Skeptic", system_prompt="You are a skeptic about open-weight AI models.")
    transcript = one_on_one_debate(max_loops=4, task=FUNCTION_TASK, agents=[optimist, skeptic], output_type="str")
    print(transcript)
    turns = [block.partition(":")[0] for block in transcript.split("\n\n") if ":" in block]
    print(f"\n-- one_on_one_debate returned {len(turns)} turns: {' -> '.join(turns)}")


if __name__ == "__main__":
    main()
