"""Run-argument checks every pattern's run API shares (``run``/``execute``/``run_batch``/``resume``;
a checkpoint's own, ``check_checkpoint``/``check_resume``, are in ``fsmchat.checkpoint``):
each refuses a bad argument before any model call with a ``ConfigError``/``ConfigTypeError`` in the
one message style (``"{owner}: {field}={value!r} is invalid: {what is allowed}"``)."""
from __future__ import annotations

import difflib
from typing import Any

from .errors import ConfigTypeError, bad_value


# A branch run's checkpoint lane is "<run id>/<step>:<branch>" (a branch such as "parallel|1"), so a
# run id holding one of these could name another run's lane: they are reserved.
LANE_CHARS = "/:|"
MAX_RUN_ID_CHARS = 200
RUN_ID_CHARS = ("one line of printable characters other than '/', ':' and '|' (letters, digits, '-', '_', '.', ...), "
                f"at most {MAX_RUN_ID_CHARS} of them")


def run_id_problem(run_id: Any) -> str | None:
    """Why ``run_id`` is not a usable run id, or None: a non-empty, one-line string without the
    characters of a branch lane's name (``LANE_CHARS``)."""
    if not isinstance(run_id, str) or not run_id.strip() or any(ord(c) < 32 or ord(c) == 127 for c in run_id):
        return f"a non-empty string: {RUN_ID_CHARS}"
    if len(run_id) > MAX_RUN_ID_CHARS:
        return f"{RUN_ID_CHARS}; it has {len(run_id):,}"
    reserved = [c for c in LANE_CHARS if c in run_id]
    if reserved:
        return (f"{RUN_ID_CHARS}; it holds {' and '.join(map(repr, reserved))}, reserved for the names of a run's "
                "branch lanes ('<run id>/<step>:<branch>', e.g. 'R/3:parallel|1')")
    return None


def check_run_id(run_id: Any, owner: str, required: bool = False) -> None:
    """``run_id`` is None (a new id is made) or a non-empty, one-line string without ``/``, ``:``
    or ``|`` (the characters of a branch lane's name)."""
    if run_id is None and not required:
        return
    problem = run_id_problem(run_id)
    if problem is not None:
        raise bad_value(owner, "run_id", run_id, problem + ("" if required else " (or None for a new id)"),
                        type_error=not isinstance(run_id, str))


def check_tasks(tasks: Any, owner: str) -> list[Any]:
    """``run_batch(tasks)``: a list (or tuple) of tasks, never a lone string (its characters would
    each become a run)."""
    if isinstance(tasks, (str, bytes)) or not isinstance(tasks, (list, tuple)):
        raise bad_value(f"{owner}.run_batch", "tasks", tasks, "a list of task strings (for one task, "
                        "run_batch([task]) or run(task))", type_error=True)
    return list(tasks)


def check_concurrency(n: Any, owner: str, field: str = "max_concurrency") -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise bad_value(f"{owner}.run_batch", field, n, "a positive int (how many runs at once)",
                        type_error=not isinstance(n, int) or isinstance(n, bool))
    return n


def check_batch(tasks: Any, max_concurrency: Any, owner: str) -> list[Any]:
    """Both ``run_batch`` arguments; returns the tasks as a list."""
    out = check_tasks(tasks, owner)
    check_concurrency(max_concurrency, owner)
    return out


def check_agents(agents: Any, owner: str, field: str = "agents") -> Any:
    """``agents`` is None or a list/tuple: a generator would be used up by the first run (and has no
    length to check), a set or dict has no speaking order."""
    if agents is None or isinstance(agents, (list, tuple)):
        return agents
    raise bad_value(owner, field, agents, "a list of agents, in speaking order (a generator would be used up by "
                    "the first run; a set or dict has no order)", type_error=True)


# the keywords every run method takes (a pattern's ``aexecute``): ``run``/``execute``/``arun`` check theirs
RUN_KEYWORDS = ("checkpoint", "run_id", "observers", "on_message", "on_start", "on_token", "commit")


def check_hooks(hooks: Any, owner: str, field: str) -> list[Any]:
    """``observers``/``on_message``/``on_start``: a list (or tuple) of callables, each called with
    what the run gives it."""
    if isinstance(hooks, (str, bytes, dict)) or not isinstance(hooks, (list, tuple)):
        raise bad_value(owner, field, hooks, "a list of callables (each called with what the run gives it), or [] "
                        "for none", type_error=True)
    for h in hooks:
        if not callable(h):
            raise bad_value(owner, field, hooks, f"a list of callables; item {h!r:.40} ({type(h).__name__}) "
                            "cannot be called", type_error=True)
    return list(hooks)


def check_token_hooks(on_token: Any, owner: str) -> list[Any]:
    """``on_token``: None, a callable, or a list of callables (each given every ``TokenDelta``)."""
    if on_token is None:
        return []
    if callable(on_token):
        return [on_token]
    return check_hooks(on_token, owner, "on_token")


def check_keywords(given: dict[str, Any], allowed: tuple[str, ...], owner: str, what: str = "keywords") -> None:
    """A call's keyword arguments (a run method's, a declared constructor's): each one of
    ``allowed``, else ``ConfigTypeError`` naming the closest (``"did you mean checkpoint?"``) and
    listing ``allowed`` as the call's ``what``."""
    for name in given:
        if name not in allowed:
            close = difflib.get_close_matches(name, allowed, n=1)
            raise ConfigTypeError(f"{owner}() got an unexpected keyword argument {name!r}"
                                  + (f"; did you mean {close[0]}?" if close else "")
                                  + f" (its {what}: {', '.join(allowed)})")
