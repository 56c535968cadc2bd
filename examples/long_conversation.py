"""A long GroupChat that stays within its model's window: older messages summarised by a scribe
(``Summarize``) in a drawn ``compact_bid`` state whenever the conversation passes 70% of the limit."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import show  # noqa: E402

from fsmchat import Agent, GroupChat, Summarize  # noqa: E402

TASK = "Plan a product launch for a small team: scope, date, risks."
WINDOW = 900  # tokens: a small window, so the offline run compacts


def build() -> GroupChat:
    scribe = Agent("Scribe", system_prompt="You keep the minutes.", max_input_tokens=WINDOW)
    agents = [Agent("Planner", system_prompt="You plan the scope and the date.", max_input_tokens=WINDOW),
              Agent("Skeptic", system_prompt="You look for the risks.", max_input_tokens=WINDOW)]
    return GroupChat(agents=agents, max_loops=24, threshold=0.1, recency_penalty=0.2,
                     context=Summarize(agent=scribe, keep_last=4, at=0.7))


if __name__ == "__main__":
    show(build(), TASK)
