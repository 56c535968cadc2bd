"""What a config or a checkpoint may make fsmchat import: the trust rule of ``from_config`` and
``resume`` (see "Security" in the README).

A config names code by reference (``"module:qualname"``): callable participants, an agent's
function tools, ``until``/``select``/conditions, ``Task`` handlers, a ``FunctionModel``'s function,
an ``agent_class``, a ``pattern_class``, a pattern ``factory``; a checkpoint stores its pattern's
``factory``. Loading
such a reference imports a module, which runs its code, so by default only fsmchat's own modules
are imported, and of fsmchat's own code a config may name only what ``ALLOWED_REFERENCES`` lists
(its documented callables; the participant kinds, ``agent``/``callable``/``human``, are data, not
references): the CLI, file loaders, report writers and stores are fsmchat's code too, and none of
them is a participant. ``allow=["myproject.agents"]`` adds module prefixes (a dotted prefix: the module
itself and its submodules, never ``myproject.agentsevil``); ``trusted=True`` loads anything,
``path/to/file.py:attr`` included. A refusal is an ``UntrustedReference`` naming the reference,
raised before anything is imported. Even when trusted, an ``agent_class`` must be an ``Agent``
subclass, a ``pattern_class`` a subclass of its pattern, a callable reference a function, and only
a ``factory`` is called while loading.
"""
from __future__ import annotations

import difflib
import importlib
import inspect
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Protocol, TypeVar, runtime_checkable

from .errors import FsmchatError, bad_value
from .targets import load_target

T = TypeVar("T")
BUILTIN_PREFIXES = ("fsmchat",)
# Of fsmchat's own code, what a config may name without allow=[...] or trusted=True: its documented
# callables, by the reference to_config() writes and by their public name. The README's "Security"
# section shows this table (a test compares the two).
ALLOWED_REFERENCES: dict[str, str] = {
    "fsmchat.flow.context:flow_input": "the flow's input as a step's output (a Task handler or a flow step)",
    "fsmchat:flow_input": "the same function by its public name",
}
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
_ATTR = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


@runtime_checkable
class PatternLike(Protocol):
    """What a pattern ``factory`` must give: an object with a pattern's run API (every
    ``fsmchat.patterns.Pattern`` has it). Checked by its shape, as this layer sits below the patterns."""

    factory: str | None

    def execute(self, task: str, **kw: object) -> object: ...

    def resume(self, run_id: str, checkpoint: object, *, input: object = None) -> object: ...

    def to_config(self) -> object: ...


class UntrustedReference(FsmchatError, PermissionError):
    """A config or checkpoint named code fsmchat may not load under the caller's trust; nothing was imported.

    By default only fsmchat's own modules are imported; ``allow=["myproject.agents"]`` adds module
    prefixes and ``trusted=True`` loads anything (see ``from_config`` and ``resume``).

    Args:
        ref: The reference refused (``"module:attr"``).
        what: Where it was found (``"participant"``, ``"run 'x' factory"``, ...).
        reason: Why it was refused, and how to allow it.

    Examples:
        >>> from fsmchat import UntrustedReference, from_config
        >>> try:
        ...     from_config({"kind": "round_robin", "agents": [{"kind": "callable", "ref": "os:system"}]})
        ... except UntrustedReference as exc:
        ...     print(exc.ref, "|", exc.reason)
        os:system | module 'os' is not allowed (allowed: ['fsmchat']); pass allow=['os'] (a module prefix) if you trust its code, or trusted=True
    """

    def __init__(self, ref: str, what: str, reason: str):
        self.ref, self.what, self.reason = ref, what, reason
        super().__init__(f"{what}: refused {ref!r}: {reason}")


def is_file_ref(ref: str) -> bool:
    """Whether a reference names a file (``path/to/x.py:attr``, ``x.py:attr``, ``C:\\x:attr``)."""
    where = ref.rpartition(":")[0]
    return "/" in where or "\\" in where or where.endswith(".py") or ":" in where


def within(module: str, prefix: str) -> bool:
    """``module`` is ``prefix`` or one of its submodules (``a.b`` is within ``a``; ``ab`` is not)."""
    return module == prefix or module.startswith(prefix + ".")


@dataclass(frozen=True)
class Trust:
    """The caller's trust: module prefixes beyond fsmchat's own (``allow``), or everything (``trusted``)."""

    allow: tuple[str, ...] = ()
    trusted: bool = False

    @classmethod
    def of(cls, allow: object = (), trusted: object = False, owner: str = "from_config") -> "Trust":
        """Checked arguments: ``allow`` a module name or a list of them, ``trusted`` a bool."""
        if isinstance(allow, Trust):
            return allow
        if not isinstance(trusted, bool):
            raise bad_value(owner, "trusted", trusted, "True or False", type_error=True)
        given = [allow] if isinstance(allow, str) else allow
        if not isinstance(given, Iterable) or isinstance(given, (bytes, dict)):
            raise bad_value(owner, "allow", allow, "a list of module prefixes such as ['myproject.agents']",
                            type_error=True)
        items: list[str] = []
        for p in given:
            if not isinstance(p, str) or not _MODULE.match(p):
                raise bad_value(owner, "allow", allow, f"{p!r} is not a dotted module name; a list of module "
                                "prefixes such as ['myproject.agents'] (files need trusted=True)")
            items.append(p)
        return cls(tuple(items), trusted)

    @property
    def prefixes(self) -> tuple[str, ...]:
        return BUILTIN_PREFIXES + self.allow

    def allows(self, module: str) -> bool:
        return self.trusted or any(within(module, p) for p in self.prefixes)

    def check(self, ref: object, what: str) -> tuple[str, str]:
        """``(module, attr)`` of an allowed reference, without importing anything."""
        if not isinstance(ref, str):
            raise bad_value(what, "reference", ref, "a 'module:attr' string", type_error=True)
        where, sep, attr = ref.rpartition(":")
        if not self.trusted and is_file_ref(ref):
            raise UntrustedReference(ref, what, "it is a file path; files are loaded only with trusted=True")
        if not sep or not where or not attr:
            raise bad_value(what, "reference", ref, "'module:attr' (or path/to/file.py:attr with trusted=True)")
        if not self.trusted and not _MODULE.match(where):
            raise UntrustedReference(ref, what, f"{where!r} is not a module name")
        if not _ATTR.match(attr) or any(p.startswith("__") for p in attr.split(".")):
            raise UntrustedReference(ref, what, f"attribute {attr!r} is not a plain public name")
        if not self.allows(where):
            raise UntrustedReference(ref, what, f"module {where!r} is not allowed (allowed: {list(self.prefixes)}); "
                                     f"pass allow=[{where!r}] (a module prefix) if you trust its code, "
                                     "or trusted=True")
        if not self.named(where, attr):
            raise self.internal(ref, what, where)
        return where, attr

    def named(self, module: str, attr: str) -> bool:
        """Whether ``module:attr`` may be loaded: anything under the caller's own ``allow`` prefixes
        (or ``trusted``); of fsmchat's own code, only what ``ALLOWED_REFERENCES`` lists."""
        return self.trusted or any(within(module, p) for p in self.allow) or f"{module}:{attr}" in ALLOWED_REFERENCES

    def internal(self, ref: str, what: str, module: str) -> UntrustedReference:
        return UntrustedReference(ref, what, "it is fsmchat's own code, not one of the callables a config may name; "
                                  "a config may use fsmchat's kinds (participants 'agent', 'callable', 'human'; "
                                  f"patterns; flow steps) and of its code only {sorted(ALLOWED_REFERENCES)}; "
                                  f"pass allow=[{module!r}] if you mean to run it, or trusted=True")

    def process(self, ref: str, what: str) -> None:
        """Refuse, unless ``trusted``, a config entry that starts a process or opens a connection
        when a run uses it (an MCP server's ``command`` or ``url``): no prefix allows that."""
        if not self.trusted:
            raise UntrustedReference(ref, what, "an MCP server starts a process (or connects to a URL) when a run "
                                     "uses it, so a config may hold one only with trusted=True")

    def resolve(self, ref: str, what: str) -> object:
        """The object ``ref`` names, once allowed; it must also be defined in an allowed module
        (``mymod:os.system`` is ``os.system``, refused unless ``os`` is allowed)."""
        where, attr = self.check(ref, what)
        if self.trusted:
            try:
                return load_target(ref)
            except (AttributeError, FileNotFoundError) as exc:  # (the message names what exists)
                raise bad_value(what, "reference", ref, str(exc)) from None
        try:
            obj: object = importlib.import_module(where)
        except ModuleNotFoundError as exc:
            if exc.name is None or not within(where, exc.name):
                raise  # the module exists; one of its own imports failed
            raise bad_value(what, "reference", ref, f"no module named {where!r} (a 'module:attr' reference names an "
                            "importable module)") from None
        for part in attr.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                names = sorted(n for n in dir(obj) if not n.startswith("_"))
                close = difflib.get_close_matches(part, names, n=1)
                raise bad_value(what, "reference", ref, f"{where!r} has no attribute {attr!r}"
                                + (f"; did you mean {where}:{close[0]}?" if close else "")) from None
        home = getattr(obj, "__module__", None)
        if inspect.ismodule(obj) or not isinstance(home, str) or not self.allows(home):
            shown = obj.__name__ if inspect.ismodule(obj) else home
            raise UntrustedReference(ref, what, f"it is {'module' if inspect.ismodule(obj) else 'defined in'} "
                                     f"{shown!r}, which is not allowed (allowed: {list(self.prefixes)})")
        # fsmchat's code re-exported elsewhere; an object a module holds (a pattern built there) is that module's
        if (inspect.isroutine(obj) or inspect.isclass(obj)) and not self.named(home, str(getattr(obj, "__qualname__", ""))):
            raise self.internal(ref, what, home)
        return obj

    def callable(self, ref: str, what: str) -> Callable[..., object]:
        """A function (participant, handler, ``until``, ``select``, condition, model function)."""
        obj = self.resolve(ref, what)
        if not inspect.isroutine(obj):
            kind = "class" if inspect.isclass(obj) else type(obj).__name__
            raise UntrustedReference(ref, what, f"it is a {kind}, not a function")
        return obj

    def subclass(self, ref: str, what: str, base: type[T]) -> type[T]:
        """A class that subclasses ``base`` (``agent_class``, ``pattern_class``)."""
        obj = self.resolve(ref, what)
        if not (inspect.isclass(obj) and issubclass(obj, base)):
            raise UntrustedReference(ref, what, f"it is not a subclass of {base.__module__}.{base.__qualname__}")
        return obj

    def factory(self, ref: object, what: str) -> str:
        """The module of an allowed ``factory`` reference, without importing anything: one of the
        caller's ``allow`` prefixes (or ``trusted``), as a factory is called while loading."""
        where, sep, attr = ref.rpartition(":") if isinstance(ref, str) else ("", "", "")
        if isinstance(ref, str) and not self.trusted and sep and _MODULE.match(where) and self.allows(where) \
                and not any(within(where, p) for p in self.allow):
            raise UntrustedReference(ref, what, "a factory is called while loading, so it must come from a module "
                                     f"you allow (allow=[...]; fsmchat's own modules hold no pattern factories)")
        return self.check(ref, what)[0]

    def pattern(self, ref: str, what: str) -> PatternLike:
        """A pattern ``factory``: a pattern object, or a function called (once) to build one. It must
        come from the caller's ``allow`` prefixes (or ``trusted``): fsmchat's own functions are not
        pattern factories, and calling one at load (``fsmchat.patterns.distributed:shutdown``) would act, not build."""
        self.factory(ref, what)
        obj = self.resolve(ref, what)
        if isinstance(obj, PatternLike):
            return obj
        if not inspect.isfunction(obj):
            raise UntrustedReference(ref, what, f"a factory must be a pattern or a function returning one; it is a "
                                     f"{type(obj).__name__}")
        built = obj()
        if not isinstance(built, PatternLike):
            raise TypeError(f"{what}: factory {ref!r} returned a {type(built).__name__}, not a pattern")
        return built
