"""Exceptions fsmchat raises, and the way a failed run's result travels on an exception."""
from __future__ import annotations

from typing import Any


class FsmchatError(Exception):
    """Base class of fsmchat's own errors."""


class GraphError(FsmchatError, ValueError):
    """A state graph is malformed; the message names the state(s) at fault and how to fix it."""


class RenderError(FsmchatError, RuntimeError):
    """A graph could not be rendered (for example Graphviz's ``dot`` is missing)."""


class NoTransitionError(FsmchatError, RuntimeError):
    """No outgoing guard of a state matched at run time."""


class ModelCallError(FsmchatError, RuntimeError):
    """A model call failed after fsmchat's retries; carries the agent name and the cause."""

    def __init__(self, agent: str, cause: BaseException, attempts: int):
        self.agent = agent
        self.cause = cause
        self.attempts = attempts
        super().__init__(f"model call for agent {agent!r} failed after {attempts} attempt(s): "
                         f"{type(cause).__name__}: {cause}")


class LimitReached(FsmchatError):
    """A run limit cut an action short. ``take_edge`` names the drawn stop edge the engine takes
    from the current state instead of ending the run with an error (see ``fsmchat.limits``)."""

    take_edge = ""


class DeadlineExceeded(LimitReached, TimeoutError):
    """The run's ``deadline_s`` passed while a model call, a callable speaker or a task ran."""

    take_edge = "past_deadline"


class BudgetExceeded(LimitReached, RuntimeError):
    """A request would cross ``max_model_calls`` (or another hard budget); it was not sent."""

    take_edge = "over_budget"


def limit_reached(exc: BaseException | None) -> LimitReached | None:
    """The ``LimitReached`` anywhere in ``exc``'s chain (model call errors wrap it), or None."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, LimitReached):
            return exc
        seen.add(id(exc))
        exc = getattr(exc, "cause", None) or exc.__cause__ or exc.__context__
    return None


def attach_result(exc: BaseException, result: Any) -> BaseException:
    """Hang a run's result (trace, transcript so far) on an exception before it propagates."""
    try:
        exc.fsmchat_result = result  # type: ignore[attr-defined]
    except (AttributeError, TypeError):  # exotic exceptions with __slots__
        pass
    return exc


def result_of(exc: BaseException) -> Any:
    """The ``RunResult`` an exception raised by a run carries, or None."""
    return getattr(exc, "fsmchat_result", None)
