"""A small MCP server written with the official SDK, for the MCP tests (a subprocess, never imported).

    python tests/support/mcp_server.py stdio            # over stdin/stdout
    python tests/support/mcp_server.py http             # streamable HTTP on 127.0.0.1, path /mcp

Over HTTP it binds a free port itself and listens before it prints ``READY <port>`` on stdout, so
a test that reads that line can connect at once (connections wait in the listen backlog until
uvicorn accepts them): no fixed sleep, no race for the port.

Tools: ``add`` (two integers), ``lookup`` (a capital city by country), ``fail`` (always an MCP
error result), ``hang`` (never returns), ``crash`` (exits the server at once), ``whoami``
(the request's Authorization header), ``pid`` (the server's process id, so a test can
kill it or check it is gone) and ``big`` (a result of any size). ``MCP_TEST_VARIANT=v2`` changes ``lookup``'s description and drops
``fail``: the same server with changed tools. The server writes ``MCP_TEST_STDERR`` (when set)
to its stderr at start, so a test can see its stderr tail in an error.
"""
from __future__ import annotations

import asyncio
import os
import socket
import sys

import uvicorn

from mcp.server.mcpserver import Context
from mcp.server.mcpserver import MCPServer as FastMCP  # the SDK's FastMCP (renamed MCPServer in mcp 2)
from mcp.server.mcpserver.exceptions import ToolError

VARIANT = os.environ.get("MCP_TEST_VARIANT", "v1")
CAPITALS = {"france": "Paris", "japan": "Tokyo", "kenya": "Nairobi"}

server = FastMCP("fsmchat-test", log_level="ERROR")  # stderr holds only what a test writes there


@server.tool()
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


@server.tool(description="The capital city of a country." if VARIANT == "v1" else "A country's capital (v2).")
def lookup(country: str) -> str:
    return CAPITALS.get(country.lower(), f"no capital known for {country}")


if VARIANT == "v1":
    @server.tool()
    def fail(reason: str) -> str:
        """Always fails with the given reason."""
        raise ToolError(f"fail was asked to fail: {reason}")


@server.tool()
async def hang() -> str:
    """Never returns (until the server is stopped)."""
    # "hanging <pid>" to the FIFO MCP_TEST_FIFO names (when set) once it has started: a test knows the
    # call is in flight, and which process to kill or to check is gone
    if os.environ.get("MCP_TEST_FIFO"):
        with open(os.environ["MCP_TEST_FIFO"], "w") as fifo:
            fifo.write(f"hanging {os.getpid()}\n")
    await asyncio.Event().wait()
    return "unreachable"


@server.tool()
def crash() -> str:
    """Exits the server at once (a server that dies mid-run)."""
    print("crash: exiting with status 3", file=sys.stderr, flush=True)
    os._exit(3)


@server.tool()
def whoami(ctx: Context) -> str:
    """The Authorization header the request carried ("none" over stdio or without one)."""
    return (ctx.headers or {}).get("authorization", "none")


@server.tool()
def pid() -> str:
    """The server's process id."""
    return str(os.getpid())


@server.tool()
def big(chars: int) -> str:
    """A result of ``chars`` characters (an oversized result)."""
    return "x" * chars


if __name__ == "__main__":
    if os.environ.get("MCP_TEST_STDERR"):
        print(os.environ["MCP_TEST_STDERR"], file=sys.stderr, flush=True)
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        print(f"READY {sock.getsockname()[1]}", flush=True)
        config = uvicorn.Config(server.streamable_http_app(), log_level="error")
        asyncio.run(uvicorn.Server(config).serve(sockets=[sock]))
