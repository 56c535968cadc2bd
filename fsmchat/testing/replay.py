"""Record and replay: a cassette keeps every model request's answer, so a test replays a real run with no model."""
from __future__ import annotations

import contextvars
import hashlib
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path

from ..errors import FsmchatError
from ..checks import JsonObject, as_object, get_int, get_list, get_object, get_str
from ..speakers.llm import INTERCEPTOR
from ..speakers.providers import own_provider
from ..speakers.wire import body_of, parse, price_of, with_cost
from .models import Fail, fail_error


# ---- record and replay ----
class CassetteMiss(FsmchatError, AssertionError):
    """A replayed run sent a request the cassette does not hold.

    A broken test double, never a run's outcome (it is raised with the run's result attached).

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import ScriptedModel, cassette
        >>> model = ScriptedModel({"critic": ["Looks good."]})
        >>> swarm = RoundRobinSwarm(agents=[model.agent("critic")])
        >>> with cassette("review.json", mode="record"):
        ...     swarm.run("Review the draft.")
        'Looks good.'
        >>> with cassette("review.json", mode="replay"):
        ...     swarm.run("Review the other draft.")
        Traceback (most recent call last):
        ...
        fsmchat.testing.replay.CassetteMiss: cassette review.json: no recorded response for agent 'critic''s request ...
    """

    fsmchat_fatal = True


def request_key(model: str, messages: object, params: dict[str, object]) -> str:
    body = {"model": model, "messages": messages, **{k: params.get(k) for k in
                                                    ("tools", "tool_choice", "response_format")}}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:32]


class Cassette:
    """Records every model request/response of a run to JSON, or replays them offline.

    Use it as a context manager (``cassette(path)`` is the same). Only the model name, messages,
    tools, tool_choice and response_format are stored: never keys.

    Args:
        path: The cassette file (JSON).
        mode: ``"record"`` (call the real model, write the file), ``"replay"`` (never call out; a
            request not in the file raises ``CassetteMiss``), ``"auto"`` (replay when the file
            exists, else record).

    Raises:
        ValueError: Another mode.
        FileNotFoundError: Replay of a cassette that does not exist.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import Cassette, ScriptedModel
        >>> model = ScriptedModel({"critic": ["Looks good."]})
        >>> swarm = RoundRobinSwarm(agents=[model.agent("critic")])
        >>> with Cassette("critic.json") as tape:  # no file yet: records
        ...     swarm.run("Review the draft."), tape.mode
        ('Looks good.', 'record')
        >>> with Cassette("critic.json") as tape:  # replays: the model is not called again
        ...     swarm.run("Review the draft."), tape.mode, tape.unused
        ('Looks good.', 'replay', 0)
        >>> model.calls()
        1
    """

    def __init__(self, path: str | os.PathLike[str], mode: str = "auto"):
        if mode not in ("auto", "record", "replay"):
            raise ValueError(f"cassette mode={mode!r}; choose from ['auto', 'record', 'replay']")
        self.path = Path(path)
        self.mode = "replay" if mode == "auto" and self.path.exists() else ("record" if mode == "auto" else mode)
        self.interactions: list[dict[str, object]] = []
        self._pending: dict[str, list[JsonObject]] = {}
        self._token: contextvars.Token[Callable[..., Awaitable[object]] | None] | None = None
        if self.mode == "replay":
            if not self.path.exists():
                raise FileNotFoundError(f"cassette {self.path} does not exist; record it first (mode='record')")
            where = f"cassette {self.path.name}"
            for value in get_list(as_object(json.loads(self.path.read_text()), where), "interactions", where):
                item = as_object(value, f"{where} interaction")
                self._pending.setdefault(get_str(item, "key", f"{where} interaction"), []).append(item)

    async def _send(self, acompletion: Callable[..., Awaitable[object]], agent: str, model: str,
                    messages: list[dict[str, object]], meta: dict[str, object], params: dict[str, object]) -> object:
        key = request_key(model, messages, params)
        if self.mode == "replay":
            queue = self._pending.get(key)
            if not queue:
                last = messages[-1].get("content") if messages else None
                raise CassetteMiss(f"cassette {self.path.name}: no recorded response for agent {agent!r}'s request "
                                   f"to {model} (key {key}); last message: {str(last)[:200]!r}. Re-record with "
                                   "mode='record' if the workflow changed on purpose.")
            item, where = queue.pop(0), f"cassette {self.path.name} interaction"
            if item.get("error"):
                error = get_object(item, "error", where)
                raise fail_error(Fail(get_int(error, "status", f"{where}.error"),
                                      get_str(error, "message", f"{where}.error")), model)
            replayed = parse(get_object(item, "response", where), model, price_of(None, model))
            return with_cost(replayed, 0.0) if own_provider(model) else replayed
        request: dict[str, object] = {"messages": messages, **{k: params[k] for k in ("tools", "tool_choice",
                                                                                   "response_format") if k in params}}
        entry: dict[str, object] = {"key": key, "agent": agent, "model": model, "request": request}
        try:
            response = await acompletion(model=model, messages=messages, metadata=meta, **params)
        except Exception as exc:
            status = getattr(exc, "status_code", 500)
            entry["error"] = {"status": status if isinstance(status, int) else 500, "message": str(exc)[:500]}
            self.interactions.append(entry)
            raise
        entry["response"] = body_of(response)
        self.interactions.append(entry)
        return response

    def __enter__(self) -> "Cassette":
        self._token = INTERCEPTOR.set(self._send)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            INTERCEPTOR.reset(self._token)
        if self.mode == "record":
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"version": 1, "interactions": self.interactions}, indent=1,
                                            sort_keys=True) + "\n")

    @property
    def unused(self) -> int:
        """Recorded interactions a replay did not consume."""
        return sum(len(v) for v in self._pending.values())


def cassette(path: str | os.PathLike[str], mode: str = "auto") -> Cassette:
    """Record a run's model calls once, then replay them: ``with cassette("tests/cassettes/x.json"): chat.run(task)``.

    Args:
        path: The cassette file (JSON).
        mode: ``"auto"``, ``"record"`` or ``"replay"`` (see ``Cassette``).

    Returns:
        The ``Cassette``, a context manager.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.testing import ScriptedModel, cassette
        >>> model = ScriptedModel({"critic": ["Looks good."]})
        >>> swarm = RoundRobinSwarm(agents=[model.agent("critic")])
        >>> for _ in range(2):  # the first run records, the second replays
        ...     with cassette("tests/cassettes/review.json"):
        ...         print(swarm.run("Review the draft."))
        Looks good.
        Looks good.
        >>> model.calls()
        1
    """
    return Cassette(path, mode)
