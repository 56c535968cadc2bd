"""Evaluations: score conversations over a dataset, side by side across variants (on pydantic-evals).

``load_dataset`` reads cases from YAML, JSON or JSONL (checked whole, errors with line and field);
``Eval(dataset, build, variants)`` runs every case under every variant and scores each run with the
dataset's evaluators: pydantic-evals' own on the output (``Equals``, ``Contains``, ...), fsmchat's
on the output (``Regex``, ``MatchesSchema``, ``Check``, the LLM ``Judge``) and on the trajectory,
which only fsmchat knows (``SpeakersInOrder``, ``SpeakersAre``, ``ToolCalled``, ``Visited``,
``StoppedBecause``, ``WithinBudget``, ``PathInGraph``). With ``executor="local"`` or ``"ray"`` the
runs are made first as batches through the batch runner (``fsmchat.evals.batch``), then scored.
``fsmchat eval FILE.py`` runs one from the command line and exits non-zero when a threshold fails.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..common.facade import lazy_exports

_MODULES = {  # each module -> the public names it defines
    ".command": ("eval_of", "parse_thresholds", "run_eval_file"),
    ".cassette": ("Cassette", "Grade"),
    ".dataset": ("CaseInputs", "load_dataset"),
    ".evaluators": ("Check", "Judge", "MatchesSchema", "PathInGraph", "Regex", "SpeakersAre", "SpeakersInOrder",
                    "StoppedBecause", "ToolCalled", "Visited", "WithinBudget"),
    ".run": ("Eval", "EvalResult", "Stat"),
    ".score": ("EvalError",),
    ".trajectory": ("ToolUse", "Trajectory"),
}
__all__ = ["eval_of", "parse_thresholds", "run_eval_file", "Cassette", "Grade", "CaseInputs", "load_dataset", "Check",
           "Judge", "MatchesSchema", "PathInGraph", "Regex", "SpeakersAre", "SpeakersInOrder", "StoppedBecause",
           "ToolCalled", "Visited", "WithinBudget", "Eval", "EvalError", "EvalResult", "Stat", "ToolUse", "Trajectory"]
__getattr__, __dir__ = lazy_exports(__name__, _MODULES)

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly (``__all__`` re-exports them)
    from .command import eval_of, parse_thresholds, run_eval_file
    from .cassette import Cassette, Grade
    from .dataset import CaseInputs, load_dataset
    from .evaluators import (Check, Judge, MatchesSchema, PathInGraph, Regex, SpeakersAre, SpeakersInOrder,
                             StoppedBecause, ToolCalled, Visited, WithinBudget)
    from .run import Eval, EvalResult, Stat
    from .score import EvalError
    from .trajectory import ToolUse, Trajectory
