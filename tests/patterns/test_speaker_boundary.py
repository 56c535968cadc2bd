"""The pattern-to-speaker boundary is typed (issue 43): every participant is a ``Speaker``
(``fsmchat.speakers.speaker``), the tool loop takes one (``ToolLoop.speak(speaker, turn)``) and
tells a speaker whose turns go through it (``tooled``: tools it can run, or handoffs) the way it
decides at run time; under ``mypy --strict`` a pattern's action that hands the tool loop or
``ChatContext.ask`` something else is refused."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from fsmchat import Agent, Human
from fsmchat.speakers import CallableSpeaker
from fsmchat.speakers.speaker import Speaker, tooled

ROOT = Path(__file__).resolve().parents[2]

ACTIONS = '''\
from fsmchat import Agent, ChatContext, Turn
from fsmchat.speakers.tool_loop import ToolLoop


async def speaks(loop: ToolLoop, turn: Turn) -> str:
    return await loop.speak(Agent("Critic"), turn)


async def asks(ctx: ChatContext) -> str:
    return await ctx.ask(Agent("Critic"), "Your view?")


async def speaks_a_name(loop: ToolLoop, turn: Turn) -> str:
    return await loop.speak("Critic", turn)


async def speaks_to_a_text(loop: ToolLoop) -> str:
    return await loop.speak(Agent("Critic"), "Your view?")


async def asks_a_name(ctx: ChatContext) -> str:
    return await ctx.ask("Critic", "Your view?")
'''


def search(query: str) -> str:
    """Search the notes."""
    return "nothing found"


def test_every_participant_is_a_speaker_and_the_tooled_ones_are_agents_with_tools_or_handoffs():
    def dev(turn):
        return "Because."

    participants = [Agent("Critic"), CallableSpeaker(dev), Human("Reviewer"), Agent("Scout", tools=[search]),
                    Agent("Lead", handoffs=[Agent("Coder")])]
    assert [isinstance(p, Speaker) for p in participants] == [True, True, True, True, True]
    assert [tooled(p) for p in participants] == [False, False, False, True, True]
    assert not isinstance("Critic", Speaker)


def test_strict_mypy_refuses_a_non_speaker_at_the_boundary(tmp_path):
    (tmp_path / "actions.py").write_text(ACTIONS)
    r = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(ROOT / ".mypy_cache"), "--config-file",
                        str(ROOT / "pyproject.toml"), "--strict", "--no-error-summary", "--hide-error-context",
                        "actions.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "MYPYPATH": str(ROOT)})
    assert r.stdout.splitlines() == [
        'actions.py:14: error: Argument 1 to "speak" of "ToolLoop" has incompatible type "str"; expected "Speaker"  '
        '[arg-type]',
        'actions.py:18: error: Argument 2 to "speak" of "ToolLoop" has incompatible type "str"; expected "Turn"  '
        '[arg-type]',
        'actions.py:22: error: Argument 1 to "ask" of "ChatContext" has incompatible type "str"; expected "Speaker"  '
        '[arg-type]',
    ], r.stdout + r.stderr
