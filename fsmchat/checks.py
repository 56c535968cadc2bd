"""Run-argument checks every pattern's run API shares (``run``/``execute``/``run_batch``/``resume``):
each refuses a bad argument before any model call with a ``ConfigError``/``ConfigTypeError`` in the
one message style (``"{owner}: {field}={value!r} is invalid: {what is allowed}"``)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from .errors import bad_value

if TYPE_CHECKING:
    from .checkpoint import Checkpointer

_PROTOCOL = ("start", "commit", "finish", "load")


def check_checkpoint(checkpoint: object, owner: str, field: str = "checkpoint") -> Checkpointer | None:
    """``checkpoint`` is None or a Checkpointer (``SqliteCheckpointer("runs.db")``, ...), never a path."""
    if checkpoint is None or all(callable(getattr(checkpoint, m, None)) for m in _PROTOCOL):
        return cast("Checkpointer | None", checkpoint)
    hint = (f"a Checkpointer, e.g. checkpoint=SqliteCheckpointer({checkpoint!r}) (from fsmchat import "
            "SqliteCheckpointer)") if isinstance(checkpoint, (str, bytes)) or hasattr(checkpoint, "__fspath__") \
        else "a Checkpointer such as SqliteCheckpointer('runs.db') or MemoryCheckpointer()"
    raise bad_value(owner, field, checkpoint, hint, type_error=True)


def check_resume(run_id: object, checkpoint: object, owner: str) -> None:
    """``resume(run_id, checkpoint)``: a run id string and the store the run was checkpointed to."""
    check_run_id(run_id, owner, required=True)
    if checkpoint is None:
        raise bad_value(owner, "checkpoint", None, "the Checkpointer the run was saved to, e.g. "
                        "resume(run_id, SqliteCheckpointer('runs.db'))", type_error=True)
    check_checkpoint(checkpoint, owner)


def check_run_id(run_id: Any, owner: str, required: bool = False) -> None:
    """``run_id`` is None (a new id is made) or a non-empty, one-line string."""
    if run_id is None and not required:
        return
    if not isinstance(run_id, str):
        raise bad_value(owner, "run_id", run_id, "a non-empty string" + ("" if required else " (or None for a new id)"),
                        type_error=True)
    if not run_id.strip() or any(ord(c) < 32 for c in run_id):
        raise bad_value(owner, "run_id", run_id, "a non-empty, one-line string" +
                        ("" if required else " (or None for a new id)"))


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
