"""MCP servers as tool sources: ``MCPServer(command=[...])`` over stdio, ``MCPServer(url=...)`` over
streamable HTTP, with the official ``mcp`` SDK (imported on first start, never by ``import fsmchat``).

An ``MCPServer`` is an async context manager: entering it starts the server (or opens the
connection) and runs the MCP handshake; leaving it stops the server. Entering it again while it
runs only counts the entry, so a batch that holds it open shares one server between its runs. The
connection lives in a task of its own: a transport failure never cancels the caller, and leaving
the context waits for the server process to be gone, even while the caller is being cancelled.

A tool's error result (``isError``) is an ``MCPToolError`` (the tool failed; the server is fine).
A server that cannot start, exits, or drops the connection is an ``MCPServerError`` naming the
server, with the tail of its stderr.

In an agent's ``tools`` an ``MCPServer`` is a tool source (``fsmchat.speakers.tools.ToolSource``):
a run starts it on the first turn of an agent that carries it, offers the model its tools (each
a ``Tool`` whose function calls the server) and stops it when the run ends, however it ends. The
run's checkpoint keeps the digest of each tool it offered, and resuming a run against a server
that now lists different tools raises a ``ToolError`` naming them, before any model call.
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Awaitable, Callable, Mapping, Sequence

from ..errors import FsmchatError, MCPServerError, bad_value
from .log_secrets import is_secret
from .tools import DEFAULT_MAX_RESULT_CHARS, Tool

STDERR_TAIL = 2000  # characters of a server's stderr an error quotes
CONNECTION_CLOSED = -32000  # the JSON-RPC code the SDK raises when the server's end of the connection closed


class MCPToolError(FsmchatError, RuntimeError):
    """An MCP tool answered with an error result (``isError``): the tool failed, its server runs on.

    Args:
        server: The server's name.
        tool: The tool called.
        text: The error result's text.

    Examples:
        >>> from fsmchat.speakers.mcp import MCPToolError
        >>> print(MCPToolError("files", "read", "no such file: notes.txt"))
        MCP tool 'read' of server 'files' failed: no such file: notes.txt
    """

    def __init__(self, server: str, tool: str, text: str):
        self.server, self.tool, self.text = server, tool, text
        super().__init__(f"MCP tool {tool!r} of server {server!r} failed: {text}")


@dataclass(frozen=True)
class MCPTool:
    """One tool an MCP server lists: its name, description and JSON schema of its arguments."""

    name: str
    description: str
    input_schema: dict[str, Any]


def _check_command(command: object) -> list[str]:
    if isinstance(command, (str, bytes)) or not isinstance(command, Sequence) or not command or \
            not all(isinstance(c, str) and c for c in command):
        raise bad_value("MCPServer", "command", command, "a non-empty list of strings, the program first, "
                        "such as ['python', 'server.py'] (not one string)", type_error=True)
    return list(command)


def _check_names(value: object, field: str) -> bool | tuple[str, ...]:
    if isinstance(value, bool):
        return value
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or \
            not all(isinstance(v, str) and v for v in value):
        raise bad_value("MCPServer", field, value, "True, False or a list of tool names", type_error=True)
    return tuple(value)


def _named(option: bool | tuple[str, ...], tool: str) -> bool:
    return option if isinstance(option, bool) else tool in option


def _check_env(env: object) -> dict[str, str] | None:
    if env is None:
        return None
    if not isinstance(env, Mapping) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise bad_value("MCPServer", "env", env, "a dict of strings to strings (added to PATH, HOME and the "
                        "few variables the server inherits)", type_error=True)
    return dict(env)


class MCPServer:
    """An MCP server whose tools an agent may call.

    Args:
        command: The program and its arguments, started as a subprocess that speaks MCP on
            stdin/stdout (``["python", "server.py"]``, ``["npx", "-y", "@modelcontextprotocol/server-everything"]``).
        url: A streamable HTTP endpoint instead (``"http://127.0.0.1:8000/mcp"``), already running.
        env: Environment variables for the subprocess. It inherits only ``PATH``, ``HOME``,
            ``USER``, ``LOGNAME``, ``SHELL`` and ``TERM`` besides these, so API keys of this
            process do not reach it unless given here.
        cwd: The subprocess's working directory.
        name: The name errors and events use (default: the command's program, or the URL).
        headers: HTTP headers sent with every request to ``url`` (an ``Authorization`` token).
        startup_timeout_s: How long the server may take to start and answer the handshake.
        approval: A person approves each call before it runs: True for every tool, or a list of
            tool names (as ``Tool(approval=True)``).
        idempotent: Calls that may safely run twice (True, or a list of tool names): a call whose
            result was not committed when the run stopped is run again on resume without asking.
        timeout_s: Seconds one tool call may take (None: only the run's deadline bounds it).
        max_result_chars: The most characters of one result the model reads (as
            ``Tool(max_result_chars=...)``; default 50,000, None: no limit).

    Examples:
        >>> from fsmchat.speakers.mcp import MCPServer
        >>> MCPServer(command=["python", "files_server.py"], name="files")
        MCPServer(command=['python', 'files_server.py'], name='files')
        >>> MCPServer(command="python files_server.py")
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigTypeError: MCPServer: command='python files_server.py' is invalid: ...
    """

    def __init__(self, command: Sequence[str] | None = None, *, url: str | None = None,
                 env: Mapping[str, str] | None = None, cwd: str | Path | None = None, name: str | None = None,
                 headers: Mapping[str, str] | None = None, startup_timeout_s: float = 30.0,
                 approval: bool | Sequence[str] = False, idempotent: bool | Sequence[str] = False,
                 timeout_s: float | None = None, max_result_chars: int | None = DEFAULT_MAX_RESULT_CHARS):
        if (command is None) == (url is None):
            raise bad_value("MCPServer", "command", command, "exactly one of command=[...] (a subprocess over "
                            "stdio) or url='http://...' (streamable HTTP)")
        self.command = None if command is None else _check_command(command)
        if url is not None and (not isinstance(url, str) or not url.startswith(("http://", "https://"))):
            raise bad_value("MCPServer", "url", url, "an http:// or https:// URL of a streamable HTTP endpoint "
                            "(such as 'http://127.0.0.1:8000/mcp')")
        self.url = url
        if url is not None and (env is not None or cwd is not None):
            raise bad_value("MCPServer", "env" if env is not None else "cwd", env if env is not None else cwd,
                            "only for a command=[...] server; a url= server runs elsewhere")
        self.env = _check_env(env)
        if cwd is not None and not isinstance(cwd, (str, Path)):
            raise bad_value("MCPServer", "cwd", cwd, "a directory path", type_error=True)
        self.cwd = None if cwd is None else str(cwd)
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise bad_value("MCPServer", "name", name, "a non-empty string", type_error=not isinstance(name, str))
        self.name = name or (os.path.basename(self.command[0]) if self.command else str(url))
        if headers is not None and (not isinstance(headers, Mapping) or
                                    not all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())):
            raise bad_value("MCPServer", "headers", headers, "a dict of strings to strings", type_error=True)
        if headers is not None and url is None:
            raise bad_value("MCPServer", "headers", headers, "only for a url= server")
        self.headers = None if headers is None else dict(headers)
        if isinstance(startup_timeout_s, bool) or not isinstance(startup_timeout_s, (int, float)) or \
                not startup_timeout_s > 0:
            raise bad_value("MCPServer", "startup_timeout_s", startup_timeout_s, "a number of seconds > 0")
        self.startup_timeout_s = float(startup_timeout_s)
        self.approval = _check_names(approval, "approval")
        self.idempotent = _check_names(idempotent, "idempotent")
        if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or
                                      not timeout_s > 0):
            raise bad_value("MCPServer", "timeout_s", timeout_s, "a number of seconds > 0, or None")
        self.timeout_s = None if timeout_s is None else float(timeout_s)
        if max_result_chars is not None and (isinstance(max_result_chars, bool) or
                                             not isinstance(max_result_chars, int) or max_result_chars < 1):
            raise bad_value("MCPServer", "max_result_chars", max_result_chars, "a positive int (the most characters "
                            "of one result the model reads), or None for no limit",
                            type_error=not isinstance(max_result_chars, int) or isinstance(max_result_chars, bool))
        self.max_result_chars = max_result_chars
        self._loop: asyncio.AbstractEventLoop | None = None
        self._entries = 0
        self._lock = asyncio.Lock()
        self._client: object = None
        self._owner: asyncio.Task[None] | None = None
        self._stop: asyncio.Event | None = None
        self._stderr: IO[bytes] | None = None
        self._tools: list[MCPTool] | None = None

    def __repr__(self) -> str:
        where = f"command={self.command!r}" if self.command is not None else f"url={self.url!r}"
        return f"MCPServer({where}, name={self.name!r})"

    @property
    def running(self) -> bool:
        """Whether the server is started and its connection is open."""
        return self._client is not None and self._owner is not None and not self._owner.done()

    # ---- lifecycle ----
    async def __aenter__(self) -> MCPServer:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._entries and self._loop is not None and self._loop.is_closed():
                self._forget()  # its loop ended without leaving the context (its connection went with it)
            if self._entries:
                raise MCPServerError(self.name, "is running in another event loop (a run in another thread); give "
                                     "each thread its own MCPServer", command=self.command, url=self.url)
            self._loop, self._lock = loop, asyncio.Lock()
        async with self._lock:
            if self._entries == 0:
                await self._start()
            self._entries += 1
        return self

    async def __aexit__(self, *exc: object) -> None:
        async with self._lock:
            if self._entries == 0:  # stopped already (a second stop() is a no-op)
                return
            self._entries -= 1
            if self._entries == 0:
                await self._shutdown()

    def _forget(self) -> None:
        self._entries, self._owner, self._client, self._tools = 0, None, None, None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    async def _start(self) -> None:
        self._stop = asyncio.Event()
        ready = asyncio.get_running_loop().create_future()
        if self.command is not None:
            self._stderr = tempfile.TemporaryFile()
        self._owner = asyncio.create_task(self._own(ready), name=f"mcp server {self.name}")
        try:
            await asyncio.wait_for(asyncio.shield(ready), self.startup_timeout_s)
        except asyncio.TimeoutError:
            ready.cancel()  # the owner's own report of the stop is not wanted
            await self._shutdown()
            raise self._error(f"did not answer the MCP handshake within {self.startup_timeout_s:g} s") from None
        except BaseException:
            await self._shutdown()
            raise

    async def _own(self, ready: asyncio.Future[None]) -> None:
        """The connection's task: opens it, reports ready (or why not), holds it until told to stop."""
        assert self._stop is not None
        try:
            try:
                from mcp import Client  # lazy: 0.8-0.9 s, paid when a server first starts
            except ImportError as exc:
                raise MCPServerError(self.name, "needs the mcp package (the official MCP SDK): "
                                     "pip install 'fsmchat[mcp]'", command=self.command, url=self.url) from exc
            async with contextlib.AsyncExitStack() as stack:
                transport = await self._transport(stack)
                client = await stack.enter_async_context(Client(transport, cache=None))
                self._client = client
                ready.set_result(None)
                await self._stop.wait()
        except BaseException as exc:  # reported to the starter, or seen by the next call as the server gone
            if not ready.done():
                ready.set_exception(self._start_error(exc))
            if not isinstance(exc, (Exception, asyncio.CancelledError)):
                raise
        finally:
            self._client = None

    async def _transport(self, stack: contextlib.AsyncExitStack) -> object:
        if self.command is None:
            import httpx2
            from mcp.client.streamable_http import streamable_http_client
            # the SDK's own client timeouts (30 s to connect, 300 s to read a held-open stream)
            http = await stack.enter_async_context(httpx2.AsyncClient(
                headers=self.headers, timeout=httpx2.Timeout(30.0, read=300.0)))
            return streamable_http_client(str(self.url), http_client=http)
        from mcp.client.stdio import StdioServerParameters, stdio_client
        program, *args = self.command
        params = StdioServerParameters(command=program, args=args, env=self.env, cwd=self.cwd)
        return stdio_client(params, errlog=self._stderr)

    async def _shutdown(self) -> None:
        """Stop the server and wait until it is gone, even while this task is being cancelled."""
        owner, self._owner = self._owner, None
        if self._stop is not None:
            self._stop.set()
        if owner is not None and self._client is None:
            owner.cancel()  # still starting (or hung in the handshake): nothing waits for the stop event yet
        if owner is not None:
            cancelled = False
            while not owner.done():
                try:
                    await asyncio.shield(owner)
                except asyncio.CancelledError:
                    cancelled = True  # wait on: the SDK's shutdown is bounded (stdin closed, then SIGTERM, SIGKILL)
                except Exception:  # the owner reported its failure already
                    pass
            if cancelled:
                raise asyncio.CancelledError
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None
        self._tools = None

    # ---- errors ----
    def stderr_tail(self) -> str:
        """The last ``STDERR_TAIL`` characters the server wrote to its stderr ("" for a url= server)."""
        if self._stderr is None or self._stderr.closed:
            return ""
        fd = self._stderr.fileno()
        size = os.fstat(fd).st_size
        start = max(0, size - STDERR_TAIL)
        return os.pread(fd, size - start, start).decode("utf-8", "replace").strip()

    def _error(self, what: str) -> MCPServerError:
        return MCPServerError(self.name, what, self.stderr_tail(),
                              command=self.command, url=self.url)

    def _start_error(self, failure: BaseException) -> BaseException:
        leaves = _leaves(failure)
        exc = next((e for e in leaves if isinstance(e, (OSError, MCPServerError))), leaves[0])
        if isinstance(exc, MCPServerError):
            return exc
        if self.url is not None and type(exc).__name__ == "ConnectError":
            return self._error(f"cannot be reached: {_describe(exc)}")
        if isinstance(exc, FileNotFoundError) and self.command is not None:
            program = self.command[0]
            why = (f"no program {program!r} on PATH" if shutil.which(program) is None and os.sep not in program
                   else f"{exc.strerror or exc}: {exc.filename or program!r}")
            return self._error(f"cannot start: {why}")
        if isinstance(exc, OSError) and self.command is not None:
            return self._error(f"cannot start: {_describe(exc)}")
        if any(getattr(e, "code", None) == CONNECTION_CLOSED for e in leaves):
            return self._error("exited (or closed its end) before it answered the MCP handshake")
        if isinstance(exc, asyncio.CancelledError):
            return self._error("was stopped before it answered the MCP handshake")
        return self._error(f"failed before it answered the MCP handshake: {_describe(failure)}")

    def _check_running(self, doing: str) -> Any:
        if self._entries == 0:
            raise MCPServerError(self.name, f"is not started; {doing} needs it inside `async with server:` "
                                 "(a run starts the servers of its agents' tools)", "", command=self.command,
                                 url=self.url)
        if not self.running:
            raise self._error(f"stopped before {doing}")
        return self._client

    async def _request(self, doing: str, call: Any) -> Any:
        """Await an SDK request; a closed connection or a failed transport becomes ``MCPServerError``."""
        from mcp import MCPError
        owner = self._owner
        assert owner is not None
        request = asyncio.ensure_future(call)
        try:
            done, _ = await asyncio.wait({request, owner}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            request.cancel()
            raise
        if request not in done:
            request.cancel()
            with contextlib.suppress(BaseException):
                await request
            raise self._error(f"stopped during {doing}")
        try:
            return request.result()
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                raise self._error(f"closed the connection during {doing}") from exc
            raise
        except (OSError, EOFError) as exc:
            raise self._error(f"failed during {doing}: {_describe(exc)}") from exc
        except Exception as exc:
            if type(exc).__module__.startswith(("httpx", "anyio")):
                raise self._error(f"failed during {doing}: {_describe(exc)}") from exc
            raise

    # ---- the tool source protocol (fsmchat.speakers.tools.ToolSource) ----
    async def start(self) -> None:
        """Start the server for a run (a no-op but counted when it runs already: see ``stop``)."""
        await self.__aenter__()

    async def stop(self) -> None:
        """The run is over: stop the server unless another holder (a batch, another run) still uses it."""
        await self.__aexit__(None, None, None)

    async def tools(self) -> list[Tool]:
        """The server's tools as ``Tool`` objects whose function calls it (the server checks the
        arguments against its schema; its error result goes back to the model as the call's result)."""
        out = []
        for t in await self.list_tools():
            try:
                out.append(Tool(self._caller(t.name), name=t.name, description=t.description,
                                parameters=t.input_schema, approval=_named(self.approval, t.name),
                                idempotent=_named(self.idempotent, t.name), timeout_s=self.timeout_s,
                                max_result_chars=self.max_result_chars))
            except ValueError as exc:
                raise self._error(f"lists a tool a model cannot call: {exc}") from None
        return out

    def _caller(self, name: str) -> Callable[..., Awaitable[str]]:
        async def call(**arguments: object) -> str:
            return await self.call_tool(name, arguments)
        call.__name__ = call.__qualname__ = name
        return call

    def to_config(self) -> dict[str, object]:
        """The server as a config's tool entry (``{"type": "mcp_server", ...}``); ``env`` and
        ``headers`` entries whose names look secret (``*_TOKEN``, ``Authorization``) are left out.
        ``from_config`` builds it again only with ``trusted=True``: it starts a process."""
        out: dict[str, object] = {"type": "mcp_server", "name": self.name}
        if self.command is not None:
            out["command"] = list(self.command)
        if self.url is not None:
            out["url"] = self.url
        for key in ("env", "headers"):
            value = getattr(self, key)
            if value:
                out[key] = {k: v for k, v in value.items() if not is_secret(k)}
        if self.cwd is not None:
            out["cwd"] = self.cwd
        if self.startup_timeout_s != 30.0:
            out["startup_timeout_s"] = self.startup_timeout_s
        for key in ("approval", "idempotent"):
            value = getattr(self, key)
            if value:
                out[key] = value if isinstance(value, bool) else list(value)
        if self.timeout_s is not None:
            out["timeout_s"] = self.timeout_s
        return out

    @classmethod
    def from_config(cls, entry: Mapping[str, Any]) -> MCPServer:
        """An ``MCPServer`` from ``to_config()``'s entry (its keys are this class's arguments)."""
        if not isinstance(entry, Mapping) or entry.get("type") != "mcp_server":
            raise bad_value("MCPServer.from_config", "entry", entry, "a dict with type='mcp_server'", type_error=True)
        options = {k: v for k, v in entry.items() if k != "type"}
        known = {"command", "url", "env", "cwd", "name", "headers", "startup_timeout_s", "approval", "idempotent",
                 "timeout_s"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise bad_value("MCPServer.from_config", "entry", entry, f"unknown option(s) {unknown}; the options are "
                            f"{sorted(known)}")
        return cls(**options)

    # ---- tools ----
    async def list_tools(self) -> list[MCPTool]:
        """The server's tools (fetched once per start; every page of the listing)."""
        if self._tools is not None and self.running:
            return list(self._tools)
        client = self._check_running("listing its tools")
        tools: list[MCPTool] = []
        cursor: str | None = None
        while True:
            page = await self._request("listing its tools", client.list_tools(cursor=cursor))
            tools += [MCPTool(t.name, t.description or "", dict(t.input_schema or {"type": "object"}))
                      for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                break
        self._tools = tools
        return list(tools)

    async def call_tool(self, name: str, arguments: Mapping[str, object] | None = None) -> str:
        """Call one tool and return its result as text (text parts joined by newlines; structured
        content as JSON when there is no text). An error result raises ``MCPToolError``; a server
        that is gone raises ``MCPServerError``."""
        if not isinstance(name, str) or not name:
            raise bad_value(f"MCP server {self.name!r}", "tool name", name, "a non-empty string", type_error=True)
        if arguments is not None and not isinstance(arguments, Mapping):
            raise bad_value(f"MCP server {self.name!r}", "arguments", arguments, "a dict (the tool's arguments)",
                            type_error=True)
        doing = f"the call to tool {name!r}"
        client = self._check_running(doing)
        from mcp import MCPError
        try:
            result = await self._request(doing, client.call_tool(name, dict(arguments or {})))
        except MCPError as exc:  # a JSON-RPC error answer (unknown tool, bad arguments): the tool failed
            raise MCPToolError(self.name, name, exc.message) from exc
        text = call_result_text(result)
        if result.is_error:
            raise MCPToolError(self.name, name, text or "(the error result has no text)")
        return text


def call_result_text(result: Any) -> str:
    """A ``CallToolResult`` as text: its text parts joined by newlines; other parts named by type
    (``[image image/png]``); the structured content as JSON when there is no text."""
    parts = []
    for c in result.content or []:
        kind = getattr(c, "type", "")
        if kind == "text":
            parts.append(c.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {getattr(c, 'mime_type', '')}]")
        elif kind == "resource":
            res = c.resource
            parts.append(getattr(res, "text", None) or f"[resource {getattr(res, 'uri', '')}]")
        elif kind == "resource_link":
            parts.append(f"[resource {getattr(c, 'uri', '')}]")
    if not parts and result.structured_content is not None:
        return json.dumps(result.structured_content, sort_keys=True)
    return "\n".join(parts)


def _leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside the ExceptionGroups the SDK's task groups raise (``exc`` itself if none)."""
    group = getattr(exc, "exceptions", None)
    if isinstance(group, tuple) and group:
        return [leaf for e in group for leaf in _leaves(e)]
    return [exc]


def _describe(exc: BaseException) -> str:
    return "; ".join(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__ for e in _leaves(exc))
