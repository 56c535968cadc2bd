"""Argument checks the constructors and run APIs share: the one rule for a number (``Number``:
every count and limit of every pattern, flow step, ``Limits`` and ``Hub``), and the run arguments
(``run``/``execute``/``run_batch``/``resume``; a checkpoint's own, ``check_checkpoint``/
``check_resume``, are in ``fsmchat.store.checkpoint``). Each refuses a bad value before any model call
with a ``ConfigError``/``ConfigTypeError`` in the one message style (``"{owner}: {field}={value!r}
is invalid: {what is allowed}"``). And the typed readers of JSON read back from a store, the wire or
a config (``get_str``, ``get_int``, ``as_object``, ...), which narrow a ``JsonValue`` to what the code
reads or raise a ``JsonShapeError`` naming where."""
from __future__ import annotations

import difflib
import numbers
import sys
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Callable, TypeGuard, TypeVar

from pydantic import GetCoreSchemaHandler, GetJsonSchemaHandler, JsonValue as JsonValue
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from .errors import REFUSED, ConfigTypeError, JsonShapeError, bad_value

JsonObject = dict[str, JsonValue]
"""A JSON object (a stored row, a wire body, a config's mapping); ``JsonValue`` is pydantic's recursive
JSON value. The same types as ``fsmchat.events``' (which defines its own: it sits below this module),
importable without loading the event models."""


T = TypeVar("T")


@dataclass(frozen=True)
class Number:
    """The one rule for a number a constructor takes: a count (``whole``: an int, ``max_loops``) or
    an amount (an int or a float: seconds, dollars, a score), finite, within its bounds.

    A bool, a string or None is not a number, whatever it would convert to (``max_loops="3"`` is
    not 3 loops, ``max_loops=True`` is not 1), and no float is a count (2.5 turns; for 3.0, say 3):
    each is a ``ConfigTypeError``; a number out of bounds is a ``ConfigError``. Both say the owner,
    the keyword, the value, what is allowed and, for a wrong type, the type given. Declared on a
    pydantic field, ``Annotated[int, Count(1)]`` (``None`` is allowed too when the field's type is
    Optional), or checked directly, ``Count(1).check(value, "Hub", "max_event_bytes")``.

    Attributes:
        whole: A count: an int (``Count``), else an int or a float (``Amount``).
        ge: The least value allowed, if any.
        gt: A bound the value must be above, if any.
        lt: A bound the value must be below, if any.
        meaning: What the number is, in the refusal (``"full passes over the roster"``).
        none: None is allowed too (set from an Optional field's type).

    Examples:
        >>> from fsmchat.checks import Amount, Count
        >>> Count(1, "full passes over the roster").check("3", "RoundRobinSwarm", "max_loops")
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigTypeError: RoundRobinSwarm: max_loops='3' is invalid: an int >= 1 (full passes over the roster), not a str
        >>> Amount(gt=0).check(0, "Limits", "deadline_s")
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigError: Limits: deadline_s=0 is invalid: a finite number > 0
    """

    whole: bool
    ge: float | None = None
    gt: float | None = None
    lt: float | None = None
    meaning: str = ""
    none: bool = False

    def allowed(self) -> str:
        """What is allowed: ``"an int >= 1 (full passes over the roster)"``."""
        bounds = " and ".join(f"{op} {b:g}" for op, b in ((">=", self.ge), (">", self.gt), ("<", self.lt))
                              if b is not None)
        return (("an int" if self.whole else "a finite number") + (f" {bounds}" if bounds else "")
                + (" or None" if self.none else "") + (f" ({self.meaning})" if self.meaning else ""))

    def problem(self, value: object) -> tuple[str, bool] | None:
        """Why ``value`` breaks the rule (what is allowed, and whether its type is what is wrong),
        or None."""
        if value is None and self.none:
            return None
        if not self.is_number(value):
            given = "None" if value is None else f"a {type(value).__name__}"
            return f"{self.allowed()}, not {given}", True
        finite = self.whole or abs(value) <= sys.float_info.max  # not nan, inf, nor an int no float can hold
        within = (self.ge is None or value >= self.ge) and (self.gt is None or value > self.gt) and \
            (self.lt is None or value < self.lt)
        return None if finite and within else (self.allowed(), False)

    def is_number(self, value: object) -> TypeGuard[float]:  # a real number (PEP 484: an int is a float)
        """Whether ``value`` has a number's type: an int for a count, an int or a float for an
        amount (never a bool)."""
        return isinstance(value, numbers.Integral if self.whole else numbers.Real) and not isinstance(value, bool)

    def check(self, value: object, owner: str, field: str) -> Any:  # int or float by the rule: callers hold it as theirs
        """``value`` as an int (a count) or a float (an amount), or None when allowed; refused
        (``ConfigTypeError``/``ConfigError``) in ``owner``'s name otherwise."""
        problem = self.problem(value)
        if problem is not None:
            raise bad_value(owner, field, value, problem[0], type_error=problem[1])
        return self._as_number(value)

    def _field(self, value: object) -> int | float | None:
        """The check as a pydantic field's: refused as a ``REFUSED`` error, which the model's
        owner turns into the same refusal (``fsmchat.errors.invalid_config``)."""
        problem = self.problem(value)
        if problem is not None:
            raise PydanticCustomError(REFUSED, "{allowed}", {"allowed": problem[0], "type_error": problem[1]})
        return self._as_number(value)

    def _as_number(self, value: object) -> int | float | None:
        """A value the rule accepted as a plain int or float (a numpy int is an int), or None."""
        if value is None or not self.is_number(value):
            return None
        return int(value) if self.whole else float(value)

    def __get_pydantic_core_schema__(self, source: object, handler: GetCoreSchemaHandler) -> CoreSchema:
        optional = typing.get_origin(source) in (typing.Union, types.UnionType) and type(None) in typing.get_args(source)
        rule = replace(self, none=optional)
        return core_schema.no_info_before_validator_function(rule._field, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        out = handler(schema)
        target = handler.resolve_ref_schema(out)
        number = next((s for s in target.get("anyOf", [target]) if s.get("type") in ("integer", "number")), target)
        for key, bound in (("minimum", self.ge), ("exclusiveMinimum", self.gt), ("exclusiveMaximum", self.lt)):
            if bound is not None:
                number[key] = bound
        return out


def Count(ge: int = 1, meaning: str = "") -> Number:  # capitalised: it reads as a type, Annotated[int, Count(1)]
    """The rule for a count: an int ``>= ge`` (``Number``)."""
    return Number(True, ge=ge, meaning=meaning)


def Amount(*, ge: float | None = None, gt: float | None = None, lt: float | None = None,
           meaning: str = "") -> Number:
    """The rule for an amount (seconds, dollars, a score): a finite int or float within the bounds
    (``Number``)."""
    return Number(False, ge=ge, gt=gt, lt=lt, meaning=meaning)


# A branch run's checkpoint lane is "<run id>/<step>:<branch>" (a branch such as "parallel|1"), so a
# run id holding one of these could name another run's lane: they are reserved.
LANE_CHARS = "/:|"
MAX_RUN_ID_CHARS = 200
RUN_ID_CHARS = ("one line of printable characters other than '/', ':' and '|' (letters, digits, '-', '_', '.', ...), "
                f"at most {MAX_RUN_ID_CHARS} of them")


def run_id_problem(run_id: object) -> str | None:
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


def check_run_id(run_id: object, owner: str, required: bool = False) -> None:
    """``run_id`` is None (a new id is made) or a non-empty, one-line string without ``/``, ``:``
    or ``|`` (the characters of a branch lane's name)."""
    if run_id is None and not required:
        return
    problem = run_id_problem(run_id)
    if problem is not None:
        raise bad_value(owner, "run_id", run_id, problem + ("" if required else " (or None for a new id)"),
                        type_error=not isinstance(run_id, str))


def check_tasks(tasks: Sequence[T], owner: str) -> list[T]:
    """``run_batch(tasks)``: a list (or tuple) of tasks, never a lone string (its characters would
    each become a run)."""
    if isinstance(tasks, (str, bytes)) or not isinstance(tasks, (list, tuple)):
        raise bad_value(f"{owner}.run_batch", "tasks", tasks, "a list of task strings (for one task, "
                        "run_batch([task]) or run(task))", type_error=True)
    return list(tasks)


RUNS_AT_ONCE = Count(1, "how many runs at once")


def check_concurrency(n: object, owner: str, field: str = "max_concurrency") -> int:
    result: int = RUNS_AT_ONCE.check(n, f"{owner}.run_batch", field)
    return result


def check_batch(tasks: Sequence[T], max_concurrency: object, owner: str) -> list[T]:
    """Both ``run_batch`` arguments; returns the tasks as a list."""
    out = check_tasks(tasks, owner)
    check_concurrency(max_concurrency, owner)
    return out


def check_agents(agents: T, owner: str, field: str = "agents") -> T:
    """``agents`` is None or a list/tuple: a generator would be used up by the first run (and has no
    length to check), a set or dict has no speaking order."""
    if agents is None or isinstance(agents, (list, tuple)):
        return agents
    raise bad_value(owner, field, agents, "a list of agents, in speaking order (a generator would be used up by "
                    "the first run; a set or dict has no order)", type_error=True)


# the keywords every run method takes (a pattern's ``aexecute``): ``run``/``execute``/``arun`` check theirs
RUN_KEYWORDS = ("checkpoint", "run_id", "observers", "on_message", "on_start", "on_token", "commit")


def check_hooks(hooks: object, owner: str, field: str) -> list[Callable[..., object]]:
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


def check_token_hooks(on_token: object, owner: str) -> list[Callable[..., object]]:
    """``on_token``: None, a callable, or a list of callables (each given every ``TokenDelta``)."""
    if on_token is None:
        return []
    if callable(on_token):
        return [on_token]
    return check_hooks(on_token, owner, "on_token")


def check_keywords(given: Mapping[str, object], allowed: tuple[str, ...], owner: str, what: str = "keywords") -> None:
    """A call's keyword arguments (a run method's, a declared constructor's): each one of
    ``allowed``, else ``ConfigTypeError`` naming the closest (``"did you mean checkpoint?"``) and
    listing ``allowed`` as the call's ``what``."""
    for name in given:
        if name not in allowed:
            close = difflib.get_close_matches(name, allowed, n=1)
            raise ConfigTypeError(f"{owner}() got an unexpected keyword argument {name!r}"
                                  + (f"; did you mean {close[0]}?" if close else "")
                                  + f" (its {what}: {', '.join(allowed)})")


# Typed readers of JSON read back (a stored row, a wire body, a config): each returns what it reads
# or raises a JsonShapeError naming where the value sits (never the value: it may hold a secret).
# ``value``/``obj[key]`` is what is read, ``where`` names ``value`` or ``obj`` for the error
# ("row 3", "exchange"), and ``default`` (where taken) is the value of a missing or null key.


def misfit(where: str, expected: str, value: object) -> JsonShapeError:
    """The error of a value read back that is not ``expected``: where it sits and its type, never the value.

    Examples:
        >>> from fsmchat.checks import misfit
        >>> str(misfit("usage.prompt_tokens", "a number", None))
        'usage.prompt_tokens: expected a number, got null'
    """
    return JsonShapeError(f"{where}: expected {expected}, got {'null' if value is None else type(value).__name__}")


def as_object(value: object, where: str) -> JsonObject:
    """``value``, a dict, as a JSON object.

    Examples:
        >>> from fsmchat.checks import as_object
        >>> as_object({"a": 1}, "row")
        {'a': 1}
    """
    if not isinstance(value, dict):
        raise misfit(where, "an object", value)
    return value


def as_list(value: object, where: str) -> list[JsonValue]:
    """``value``, a list, as a JSON array.

    Examples:
        >>> from fsmchat.checks import as_list
        >>> as_list([1, "two"], "messages")
        [1, 'two']
    """
    if not isinstance(value, list):
        raise misfit(where, "an array", value)
    return value



def as_str(value: object, where: str) -> str:
    """``value``, a string.

    Examples:
        >>> from fsmchat.checks import as_str
        >>> as_str("alice", "participant_order")
        'alice'
    """
    if not isinstance(value, str):
        raise misfit(where, "a string", value)
    return value


def as_str_map(value: object, where: str) -> dict[str, str]:
    """``value``, an object whose every value is a string (a stored chat message, a digest table).

    Examples:
        >>> from fsmchat.checks import as_str_map
        >>> as_str_map({"role": "user", "content": "Hi"}, "memory")
        {'role': 'user', 'content': 'Hi'}
    """
    return {k: as_str(v, f"{where}.{k}") for k, v in as_object(value, where).items()}

def as_opt_object(value: object, where: str) -> dict[str, object]:
    """A stored part that may be absent: ``value`` as an object, ``{}`` for None.

    Examples:
        >>> from fsmchat.checks import as_opt_object
        >>> as_opt_object(None, "state.digests"), as_opt_object({"a": 1}, "state.digests")
        ({}, {'a': 1})
    """
    if value is not None and not isinstance(value, dict):
        raise misfit(where, "an object", value)
    return value if value is not None else {}


def as_opt_list(value: object, where: str) -> list[object]:
    """A stored part that may be absent: ``value`` as an array, ``[]`` for None.

    Examples:
        >>> from fsmchat.checks import as_opt_list
        >>> as_opt_list(None, "exchange.marks"), as_opt_list([1], "exchange.marks")
        ([], [1])
    """
    if value is not None and not isinstance(value, list):
        raise misfit(where, "an array", value)
    return value if value is not None else []


def get_object(obj: Mapping[str, object], key: str, where: str) -> JsonObject:
    """The JSON object at ``obj[key]`` (missing is an error).

    Examples:
        >>> from fsmchat.checks import get_object
        >>> get_object({"usage": {"prompt_tokens": 3}}, "usage", "body")
        {'prompt_tokens': 3}
    """
    return as_object(obj.get(key), f"{where}.{key}")


def get_list(obj: Mapping[str, object], key: str, where: str) -> list[JsonValue]:
    """The JSON array at ``obj[key]`` (missing is an error).

    Examples:
        >>> from fsmchat.checks import get_list
        >>> get_list({"choices": []}, "choices", "body")
        []
    """
    return as_list(obj.get(key), f"{where}.{key}")


def get_str(obj: Mapping[str, object], key: str, where: str) -> str:
    """The string at ``obj[key]`` (missing is an error).

    Examples:
        >>> from fsmchat.checks import get_str
        >>> get_str({"role": "user"}, "role", "message")
        'user'
    """
    return as_str(obj.get(key), f"{where}.{key}")


def get_opt_str(obj: Mapping[str, object], key: str, where: str) -> str | None:
    """The string at ``obj[key]``, or None when it is missing or null.

    Examples:
        >>> from fsmchat.checks import get_opt_str
        >>> get_opt_str({"content": None}, "content", "message") is None
        True
    """
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise misfit(f"{where}.{key}", "a string or null", value)
    return value


def _scalar(obj: Mapping[str, object], key: str, where: str, default: object, kinds: tuple[type, ...],
            expected: str) -> object:
    """``obj[key]`` when it is one of ``kinds`` (never a bool unless ``kinds`` is ``(bool,)``), else ``default``
    for a missing or null key, else the error."""
    value = obj.get(key)
    if value is None and default is not None:
        return default
    if not isinstance(value, kinds) or (isinstance(value, bool) and kinds != (bool,)):
        raise misfit(f"{where}.{key}", expected, value)
    return value


def get_int(obj: Mapping[str, object], key: str, where: str, default: int | None = None) -> int:
    """The integer at ``obj[key]`` (a bool is not one), or ``default`` when it is missing or null.

    Examples:
        >>> from fsmchat.checks import get_int
        >>> get_int({"prompt_tokens": 12}, "prompt_tokens", "usage"), get_int({}, "n", "usage", 0)
        (12, 0)
    """
    value = _scalar(obj, key, where, default, (int,), "an integer")
    assert isinstance(value, int)  # _scalar returned an int or the int default
    return value


def get_float(obj: Mapping[str, object], key: str, where: str, default: float | None = None) -> float:
    """The number at ``obj[key]`` as a float (a bool is not one), or ``default`` when missing or null.

    Examples:
        >>> from fsmchat.checks import get_float
        >>> get_float({"cost": 1}, "cost", "usage")
        1.0
    """
    value = _scalar(obj, key, where, default, (int, float), "a number")
    assert isinstance(value, (int, float))  # _scalar returned a number or the float default
    return float(value)


def get_bool(obj: Mapping[str, object], key: str, where: str, default: bool | None = None) -> bool:
    """The boolean at ``obj[key]``, or ``default`` when it is missing or null.

    Examples:
        >>> from fsmchat.checks import get_bool
        >>> get_bool({"ok": True}, "ok", "row"), get_bool({}, "ok", "row", False)
        (True, False)
    """
    value = _scalar(obj, key, where, default, (bool,), "a boolean")
    assert isinstance(value, bool)  # _scalar returned a bool or the bool default
    return value
