"""Single values in their config form, and back: a function or class by its import path
(``callable_ref``: ``"module:qualname"``, only module-level ones travel), litellm options without
their secrets (``strip_secrets``), an agent's tools as entries (``tool_entry``: an MCP server's own
form, a function tool by its function's import path; ``function_tool`` rebuilds one under the
reader's trust) and any value as JSON data (``jsonable``). ``fsmchat.config`` writes and reads
whole patterns with them (it sits beside this module, in the same layer), and so do the kinds
that write their own config forms (flow steps, scripted models).
"""
from __future__ import annotations

import importlib
import inspect
import json
import sys
from collections.abc import Mapping
from typing import Any

from ..errors import bad_value
from ..speakers.log_secrets import is_secret
from ..speakers.mcp import MCPServer
from ..speakers.tools import Tool
from ..trust import Trust


# ---- callables by import path ----
def callable_ref(fn: object, what: str) -> str:
    """``"module:qualname"`` of a module-level function (or class), else a ``TypeError`` saying why."""
    label = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or repr(fn)
    if not callable(fn):
        raise TypeError(f"{what}: {fn!r} is not callable")
    qualname = getattr(fn, "__qualname__", None)
    module = getattr(fn, "__module__", None)
    if not (inspect.isfunction(fn) or inspect.isclass(fn) or inspect.isbuiltin(fn)) or not qualname or not module:
        raise TypeError(f"{what}: {label} ({type(fn).__name__}) cannot be shipped in a config: only module-level "
                        "functions travel, by import path; wrap it in a function defined at module level")
    if "<lambda>" in qualname:
        raise TypeError(f"{what}: {label} is a lambda, which cannot be shipped in a config (it has no import "
                        "path); define it as a function at module level")
    if "<locals>" in qualname:
        raise TypeError(f"{what}: {label} is defined inside a function (a closure), which cannot be shipped in "
                        "a config (it has no import path); define it at module level and pass state as data")
    if module == "__main__":
        main = sys.modules.get("__main__")
        path = getattr(main, "__file__", None)
        if not path or _resolve(main, qualname) is not fn:
            raise TypeError(f"{what}: {label} lives in an interactive __main__ and has no import path; "
                            "define it in a module")
        return f"{path}:{qualname}"
    try:
        found = _resolve(importlib.import_module(module), qualname)
    except Exception:
        found = None
    if found is not fn:
        raise TypeError(f"{what}: {label} is not reachable as {module}:{qualname} (was it renamed, decorated "
                        "or replaced?); only module-level functions can be shipped in a config")
    return f"{module}:{qualname}"


def _resolve(obj: object, qualname: str) -> object:
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return obj


def opt_ref(fn: object, what: str) -> str | None:
    """``callable_ref`` of ``fn``, or None for None."""
    return None if fn is None else callable_ref(fn, what)


# ---- secrets ----
def secret_option(name: str) -> bool:
    """Whether a litellm option names a credential (``is_secret``: ``api_key``, ``Authorization``,
    ``access_token``...; token *counts* such as ``max_tokens`` are options a worker needs)."""
    return is_secret(name)


def strip_secrets(value: object) -> object:
    """``value`` without any secret-named entry (at any depth of nested dicts)."""
    if isinstance(value, dict):
        return {k: strip_secrets(v) for k, v in value.items() if not (isinstance(k, str) and secret_option(k))}
    if isinstance(value, (list, tuple)):
        return [strip_secrets(v) for v in value]
    return value


def is_mcp_server(entry: object) -> bool:
    """Whether an agent's tool entry is an MCP server's (``MCPServer.to_config()``)."""
    return isinstance(entry, dict) and entry.get("type") == "mcp_server"


TOOL_OPTIONS = ("name", "description", "parameters", "approval", "idempotent", "timeout_s")
"""A function tool's config entry: ``{"type": "tool", "ref": "module:qualname"}`` plus each of these
that differs from what ``Tool(fn)`` derives or defaults to (written only when set)."""


def is_function_tool(entry: object) -> bool:
    """Whether an agent's tool entry is a function tool's (``{"type": "tool", "ref": ...}``)."""
    return isinstance(entry, dict) and entry.get("type") == "tool"


def tool_entry(t: object, what: str) -> object:
    """An agent's tool as config data: an MCP server's own form, a ``Tool`` with a function by the
    function's import path (``callable_ref``: a module-level function; a lambda, a closure or a
    bound method is a ``TypeError`` saying so) and its options that differ from the defaults, a
    ``Tool`` without a function as its JSON schema, a schema dict as it is."""
    if isinstance(t, MCPServer):
        return t.to_config()
    if not isinstance(t, Tool):
        return t
    if t.fn is None:
        return t.spec()
    out: dict[str, object] = {"type": "tool", "ref": callable_ref(t.fn, f"{what} tool {t.name!r}")}
    defaults: dict[str, object] = {"approval": False, "idempotent": False, "timeout_s": None}
    try:
        derived = Tool(t.fn)
        defaults.update(name=derived.name, description=derived.description, parameters=derived.parameters)
    except (TypeError, ValueError):  # a schema given for a function fsmchat cannot derive one from: written out
        pass
    for key in TOOL_OPTIONS:
        if key not in defaults or getattr(t, key) != defaults[key]:
            out[key] = getattr(t, key)
    return out


def function_tool(trust: Trust, entry: dict[str, Any], what: str) -> Tool:
    """A function tool's entry rebuilt: its function loaded under ``trust`` (the reader's)."""
    unknown = sorted(set(entry) - {"type", "ref", *TOOL_OPTIONS})
    if unknown:
        raise bad_value(what, "entry", entry, f"'type', 'ref' and the options {list(TOOL_OPTIONS)}; "
                        f"unknown {unknown}")
    fn = trust.callable(str(entry.get("ref") or ""), what)
    return Tool(fn, **{k: entry[k] for k in TOOL_OPTIONS if k in entry})


def jsonable(value: object, what: str) -> Any:
    """``value`` as JSON data (a copy), else a ``TypeError`` saying ``what`` must be JSON-able."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-able to go in a config: {exc}") from None
