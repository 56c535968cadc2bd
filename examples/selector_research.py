"""A research team where a selector model picks who speaks next (AutoGen's SelectorGroupChat).

After each reply the selector is asked, with a forced `select_speaker` tool whose `speaker` is an
enum of the candidates allowed now, who goes next. `allowed` says who may follow whom (the graph
draws one edge per pair): the planner hands work to the researcher or the analyst, and only the
analyst may hand to the writer. The run stops once the writer has written the report, on a repeated
cycle ("livelock") or after `max_turns`. Offline by default: the offline selector picks the
candidate the last message mentions, else the next one in turn.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import show  # noqa: E402

from fsmchat import Agent, SelectorGroupChat  # noqa: E402

TASK = "Research how remote work affects team productivity; the analyst should weigh the evidence."


def final_report(messages) -> bool:
    """the writer delivered the report"""
    return messages[-1].role == "writer"


def build() -> SelectorGroupChat:
    team = [Agent("planner", system_prompt="You break the question into steps and assign them."),
            Agent("researcher", system_prompt="You find studies and data on the question."),
            Agent("analyst", system_prompt="You weigh the evidence and its quality."),
            Agent("writer", system_prompt="You write the final report; start it with FINAL.")]
    allowed = {"planner": ["researcher", "analyst"], "researcher": ["planner", "analyst"],
               "analyst": ["researcher", "writer"], "writer": ["planner"]}
    return SelectorGroupChat(team, selector=Agent("selector", system_prompt="You coordinate a research team."),
                             allowed=allowed, start="planner", until=final_report, max_turns=8,
                             name="Research-Team", description="A selector picks who speaks next, within allowed")


def main() -> None:
    show(build(), TASK)


if __name__ == "__main__":
    main()
