"""``fsmchat eval FILE.py``: run the eval a file defines, print the reports, gate on thresholds.

The file defines ``EVAL`` (an ``Eval``) or ``build_eval()`` returning one, and optionally
``THRESHOLDS`` (evaluator name -> the lowest mean that passes). The command's options override
the eval's (``--repeat``, ``--max-calls``, ``--cassette``, ``--rescore``, ``--executor``, ...) and add thresholds;
it exits 0 when every case ran and every threshold holds, 1 otherwise (each miss named), and 2 on
bad input (before any model call).
"""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence, SupportsFloat, SupportsIndex

from ..errors import ConfigError, ConfigTypeError, FsmchatError
from ..store.checkpoint import Checkpointer
from ..targets import load_file
from .run import Eval

EXIT_PASSED, EXIT_FAILED = 0, 1
EXAMPLE = """from fsmchat import RoundRobinSwarm
from fsmchat.evals import Eval, PathInGraph
EVAL = Eval([{"task": "Hi"}], lambda: RoundRobinSwarm(agents=[lambda turn: "Hi."], max_loops=1),
            evaluators=[PathInGraph()])
THRESHOLDS = {"PathInGraph": 1}
"""  # the file the examples below write (a tiny eval)


def eval_of(path: str | Path) -> tuple[Eval, dict[str, float]]:
    """The eval a file defines (``EVAL`` or ``build_eval()``) and its ``THRESHOLDS``.

    Args:
        path: The ``.py`` file.

    Returns:
        ``(eval, thresholds)``.

    Raises:
        ConfigError: The file defines neither, or its thresholds are not name -> number.

    Examples:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "ev.py"
        >>> _ = path.write_text(EXAMPLE)
        >>> ev, thresholds = eval_of(path)
        >>> list(ev.variants), thresholds
        (['default'], {'PathInGraph': 1.0})
    """
    module = load_file(Path(path))
    found = getattr(module, "EVAL", None)
    if found is None and callable(getattr(module, "build_eval", None)):
        found = module.build_eval()
    if not isinstance(found, Eval):
        raise ConfigError(f"{path}: define EVAL = fsmchat.evals.Eval(...) or def build_eval() returning one "
                          f"(found {type(found).__name__})")
    return found, parse_thresholds(getattr(module, "THRESHOLDS", {}) or {}, f"{path}: THRESHOLDS")


def parse_thresholds(given: Mapping[str, object] | Sequence[str], where: str = "--threshold") -> dict[str, float]:
    """Thresholds from a dict or from ``NAME=VALUE`` strings, each a number from 0 to 1.

    Args:
        given: ``{"Contains": 0.9}`` or ``["Contains=0.9"]``.
        where: Where they came from, for the error.

    Returns:
        Evaluator name -> the lowest mean that passes.

    Raises:
        ConfigError: A threshold is not ``NAME=VALUE`` or its value is not a number from 0 to 1.

    Examples:
        >>> parse_thresholds(["PathInGraph=1", "Judge=0.75"])
        {'PathInGraph': 1.0, 'Judge': 0.75}
    """
    pairs: list[tuple[str, object]] = list(given.items()) if isinstance(given, Mapping) else []
    if not isinstance(given, Mapping):
        for text in given:
            name, eq, given_value = str(text).rpartition("=")
            if not eq or not name:
                raise ConfigError(f"{where} {text!r} is invalid: NAME=VALUE, e.g. Contains=0.9")
            pairs.append((name, given_value))
    out = {}
    for name, value in pairs:
        try:  # what float() takes; anything else is no number
            number = float(value) if isinstance(value, (str, bytes, bytearray, SupportsFloat, SupportsIndex)) else -1.0
        except (TypeError, ValueError):
            number = -1.0
        if isinstance(value, bool) or not 0 <= number <= 1:
            raise ConfigError(f"{where}: {name}={value!r} is invalid: a number from 0 to 1 (the lowest mean that "
                              "passes)")
        out[str(name)] = number
    return out


def run_eval_file(path: str | Path, *, thresholds: Sequence[str] = (), variants: Sequence[str] = (),
                  checkpoint: Checkpointer | None = None, verbose: bool = False, **overrides: Any) -> int:
    """Run a file's eval with the command's options; print the reports and what failed; the exit code.

    Args:
        path: The ``.py`` file defining ``EVAL``/``build_eval()``.
        thresholds: More ``NAME=VALUE`` thresholds (over the file's ``THRESHOLDS``).
        variants: Run only these variants (all when empty).
        checkpoint: A store to keep the runs in, and the eval's record (``fsmchat ui`` shows it at ``/evals``).
        verbose: Show each case's output and the evaluators' reasons.
        **overrides: ``Eval`` fields to override when not None (``repeat``, ``max_calls``, ...).

    Returns:
        0 when every case ran and every threshold holds, else 1.

    Raises:
        ConfigError: Bad input (the file, a threshold, a variant, an override), before any model call.

    Examples:
        >>> import contextlib, io, pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "ev.py"
        >>> _ = path.write_text(EXAMPLE)
        >>> with contextlib.redirect_stdout(io.StringIO()) as out:
        ...     code = run_eval_file(path, repeat=2)
        >>> code, out.getvalue().splitlines()[-1]
        (0, 'passed: PathInGraph >= 1.0')
    """
    ev, limits = eval_of(path)
    limits.update(parse_thresholds(thresholds))
    if variants:
        unknown = [v for v in variants if v not in ev.variants]
        if unknown:
            raise ConfigError(f"--variant {', '.join(unknown)}: no such variant; {path} has "
                              f"{', '.join(ev.variants)}")
        overrides["variants"] = {v: ev.variants[v] for v in variants}
    if checkpoint is not None:
        overrides["checkpoint"] = checkpoint
    changes = {k: v for k, v in overrides.items() if v is not None}
    try:
        ev = dataclasses.replace(ev, **changes) if changes else ev
    except FsmchatError:  # an override the eval refuses says so itself
        raise
    except TypeError as exc:  # a field the eval does not have
        raise ConfigTypeError(f"fsmchat eval: {exc}") from None
    result = ev.run()
    result.print(include_output=verbose, include_reasons=verbose)
    problems = result.failures() + result.below(limits)
    print(f"\n-- {result.name}: {sum(len(r.cases) + len(r.failures) for r in result.reports.values())} runs over "
          f"{len(result.reports)} variant(s); {result.calls} model calls, {result.recorded} runs from the cassette"
          + ("" if ev.cassette is None else f" ({ev.cassette})"))
    if result.eval_id is not None:
        print(f"-- evaluation {result.eval_id} is kept in the store beside its runs (fsmchat ui: /evals/{result.eval_id})")
    if problems:
        print("FAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
        return EXIT_FAILED
    print("passed" + (f": {', '.join(f'{k} >= {v}' for k, v in limits.items())}" if limits else ""))
    return EXIT_PASSED
