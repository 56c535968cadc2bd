"""MCPServer against a real MCP server written with the official SDK (tests/support/mcp_server.py), started as
a subprocess: over stdio (MCPServer starts it) and over streamable HTTP on 127.0.0.1 (the test starts
it and reads its READY line). Tools listed and called, error results, a server killed mid-call, a
command that does not exist, and no server process left behind after a run that ends, fails or is
cancelled."""
import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fsmchat.errors import ConfigError, ConfigTypeError, FsmchatError, MCPServerError
from fsmchat.speakers.mcp import MCPServer, MCPTool, MCPToolError
from fsmchat.speakers.tools import Tool, changed_tools, tool_digest
from support.mcp_fixtures import COMMAND, SERVER, fifo, gone, http_server, wait_for_hang  # noqa: F401 (fixtures)

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install -e '.[mcp]')")

ROOT = Path(__file__).resolve().parents[2]

ADD_SCHEMA = {"type": "object", "title": "addArguments", "required": ["a", "b"],
              "properties": {"a": {"title": "A", "type": "integer"}, "b": {"title": "B", "type": "integer"}}}
LOOKUP_SCHEMA = {"type": "object", "title": "lookupArguments", "required": ["country"],
                 "properties": {"country": {"title": "Country", "type": "string"}}}


def stdio(**kw) -> MCPServer:
    kw.setdefault("name", "capitals")
    return MCPServer(command=COMMAND, **kw)


# ---- over stdio ----
def test_lists_the_tools_with_their_descriptions_and_schemas():
    async def main():
        async with stdio() as server:
            return await server.list_tools()

    tools = asyncio.run(main())
    assert [t.name for t in tools] == ["add", "lookup", "fail", "hang", "crash", "whoami", "pid", "big"]
    assert tools[0] == MCPTool("add", "Add two integers.", ADD_SCHEMA)
    assert tools[1] == MCPTool("lookup", "The capital city of a country.", LOOKUP_SCHEMA)


def test_calls_tools_and_returns_their_text():
    async def main():
        async with stdio() as server:
            return [await server.call_tool("add", {"a": 2, "b": 40}),
                    await server.call_tool("lookup", {"country": "Japan"}),
                    await server.call_tool("lookup", {"country": "Mars"})]

    assert asyncio.run(main()) == ["42", "Tokyo", "no capital known for Mars"]


def test_an_error_result_is_a_tool_error_and_the_server_runs_on():
    async def main():
        async with stdio() as server:
            with pytest.raises(MCPToolError) as failed:
                await server.call_tool("fail", {"reason": "disk full"})
            with pytest.raises(MCPToolError) as unknown:
                await server.call_tool("search", {"q": "x"})
            with pytest.raises(MCPToolError) as invalid:
                await server.call_tool("add", {"a": "two", "b": 1})
            return failed.value, unknown.value, invalid.value, await server.call_tool("add", {"a": 1, "b": 1})

    failed, unknown, invalid, after = asyncio.run(main())
    assert str(failed) == ("MCP tool 'fail' of server 'capitals' failed: "
                           "Error executing tool fail: fail was asked to fail: disk full")
    assert (failed.server, failed.tool) == ("capitals", "fail")
    assert isinstance(failed, FsmchatError) and not isinstance(failed, MCPServerError)
    assert str(unknown) == "MCP tool 'search' of server 'capitals' failed: Unknown tool: search"
    assert "Input should be a valid integer" in invalid.text
    assert after == "2"


def test_a_server_killed_mid_call_is_a_server_error_naming_it_with_its_stderr_tail(fifo):
    async def main():
        server = stdio(env={"MCP_TEST_STDERR": "capitals: loaded 3 countries", "MCP_TEST_FIFO": str(fifo)})
        async with server:
            pid = int(await server.call_tool("pid"))
            call = asyncio.create_task(server.call_tool("hang"))
            await wait_for_hang(fifo)
            os.kill(pid, signal.SIGKILL)
            with pytest.raises(MCPServerError) as during:
                await call
            with pytest.raises(MCPServerError) as after:
                await server.call_tool("add", {"a": 1, "b": 2})
            return during.value, after.value

    during, after = asyncio.run(main())
    assert str(during) == (f"MCP server 'capitals' (command {COMMAND!r}) closed the connection during the call to "
                           "tool 'hang'; its stderr ends with:\ncapitals: loaded 3 countries")
    assert (during.server, during.stderr) == ("capitals", "capitals: loaded 3 countries")
    assert str(after).startswith("MCP server 'capitals' (command ") and "tool 'add'" in str(after)


def test_a_command_that_does_not_exist_is_a_clear_startup_error():
    async def main():
        async with MCPServer(command=["no-such-mcp-server", "--stdio"]):
            pass

    with pytest.raises(MCPServerError) as exc:
        asyncio.run(main())
    assert str(exc.value) == ("MCP server 'no-such-mcp-server' (command ['no-such-mcp-server', '--stdio']) "
                              "cannot start: no program 'no-such-mcp-server' on PATH")


def test_a_server_that_exits_before_the_handshake_says_so_with_its_stderr():
    crash = [sys.executable, "-c", "import sys; print('config.toml: no such file', file=sys.stderr); sys.exit(2)"]

    async def main():
        async with MCPServer(command=crash, name="files"):
            pass

    with pytest.raises(MCPServerError) as exc:
        asyncio.run(main())
    assert str(exc.value) == (f"MCP server 'files' (command {crash!r}) exited (or closed its end) before it "
                              "answered the MCP handshake; its stderr ends with:\nconfig.toml: no such file")


def test_a_server_that_never_answers_the_handshake_is_stopped_and_named():
    async def main():
        async with MCPServer(command=["sleep", "1000"], startup_timeout_s=0.5):
            pass

    with pytest.raises(MCPServerError) as exc:
        asyncio.run(main())
    assert str(exc.value) == ("MCP server 'sleep' (command ['sleep', '1000']) did not answer the MCP handshake "
                              "within 0.5 s")


def test_a_call_outside_the_context_says_how_to_start_the_server():
    with pytest.raises(MCPServerError, match=r"^MCP server 'capitals' \(command .*\) is not started; the call to "
                                             r"tool 'add' needs it inside `async with server:`"):
        asyncio.run(stdio().call_tool("add", {"a": 1, "b": 2}))


# ---- no leaked processes ----
def test_the_server_process_is_gone_when_the_context_ends():
    async def main():
        async with stdio() as server:
            pid = int(await server.call_tool("pid"))
            alive = not gone(pid)
        return alive, gone(pid)  # checked before the event loop closes (that would cancel a left-over task)

    assert asyncio.run(main()) == (True, True)


def test_the_server_process_is_gone_when_the_body_fails():
    async def main():
        pids = []
        with pytest.raises(RuntimeError, match="the run failed"):
            async with stdio() as server:
                pids.append(int(await server.call_tool("pid")))
                raise RuntimeError("the run failed")
        return gone(pids[0])

    assert asyncio.run(main()) is True


def test_the_server_process_is_gone_after_the_caller_is_cancelled_mid_call(fifo):
    pids = []

    async def body():
        async with stdio(env={"MCP_TEST_FIFO": str(fifo)}) as server:
            pids.append(int(await server.call_tool("pid")))
            await server.call_tool("hang")

    async def main():
        task = asyncio.create_task(body())
        await wait_for_hang(fifo)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return gone(pids[0])

    assert asyncio.run(main()) is True


def test_nested_entries_share_one_server_started_once():
    async def main():
        server = stdio()
        async with server:
            first = await server.call_tool("pid")
            async with server:  # a run inside a batch that holds the server open
                inner = await server.call_tool("pid")
            still = server.running
            again = await server.call_tool("pid")
        return first, inner, again, still, server.running

    first, inner, again, still, after = asyncio.run(main())
    assert first == inner == again and still is True and after is False
    assert gone(int(first))


# ---- over streamable HTTP ----
def test_over_http_lists_calls_and_reports_error_results(http_server):
    url, _ = http_server

    async def main():
        async with MCPServer(url=url, name="capitals", headers={"Authorization": "Bearer t0ken"}) as server:
            names = [t.name for t in await server.list_tools()]
            answer = await server.call_tool("lookup", {"country": "kenya"})
            with pytest.raises(MCPToolError) as failed:
                await server.call_tool("fail", {"reason": "quota"})
            return names, answer, failed.value, await server.call_tool("whoami")

    names, answer, failed, auth = asyncio.run(main())
    assert auth == "Bearer t0ken"  # the headers= reach the server
    assert names == ["add", "lookup", "fail", "hang", "crash", "whoami", "pid", "big"]
    assert answer == "Nairobi"
    assert str(failed) == ("MCP tool 'fail' of server 'capitals' failed: "
                           "Error executing tool fail: fail was asked to fail: quota")


def test_over_http_a_server_killed_mid_call_is_a_server_error(http_server, fifo, monkeypatch):
    url, proc = http_server
    proc.kill()
    proc.wait()
    monkeypatch.setenv("MCP_TEST_FIFO", str(fifo))
    killable = subprocess.Popen([sys.executable, str(SERVER), "http"], stdout=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{int(killable.stdout.readline().split()[1])}/mcp"

        async def main():
            async with MCPServer(url=url) as server:
                call = asyncio.create_task(server.call_tool("hang"))
                await wait_for_hang(fifo)
                killable.kill()
                killable.wait()
                with pytest.raises(MCPServerError) as exc:
                    await call
                return exc.value

        err = asyncio.run(main())
    finally:
        killable.kill()
        killable.wait()
        killable.stdout.close()
    assert str(err) == f"MCP server '{url}' closed the connection during the call to tool 'hang'"
    assert (err.server, err.url, err.stderr) == (url, url, "")


def test_over_http_an_unreachable_url_is_a_startup_error(http_server):
    url, proc = http_server
    proc.kill()
    proc.wait()  # the port is closed now

    async def main():
        async with MCPServer(url=url, name="capitals"):
            pass

    with pytest.raises(MCPServerError) as exc:
        asyncio.run(main())
    assert str(exc.value).startswith(f"MCP server 'capitals' ({url}) cannot be reached: ConnectError: ")


# ---- as a tool source: Tool objects whose function calls the server; digests a resume compares ----
def test_as_a_tool_source_it_offers_tools_that_call_the_server():
    async def main():
        server = stdio(idempotent=["lookup"], approval=["add"], timeout_s=5)
        await server.start()
        try:
            tools = await server.tools()
            return tools, await tools[1].run({"country": "France"}, None)
        finally:
            await server.stop()
            await server.stop()  # a second stop is a no-op, not a count below zero
            assert not server.running

    tools, answer = asyncio.run(main())
    assert all(isinstance(t, Tool) and t.runnable for t in tools)
    assert [(t.name, t.approval, t.idempotent, t.timeout_s) for t in tools] == [
        ("add", True, False, 5.0), ("lookup", False, True, 5.0), ("fail", False, False, 5.0),
        ("hang", False, False, 5.0), ("crash", False, False, 5.0), ("whoami", False, False, 5.0),
        ("pid", False, False, 5.0), ("big", False, False, 5.0)]
    assert tools[0].spec() == {"type": "function", "function": {
        "name": "add", "description": "Add two integers.", "parameters": ADD_SCHEMA}}
    assert answer == "Paris"


def test_changed_tools_name_what_was_added_removed_or_changed():
    async def digests(server):
        async with server:
            return {t.name: tool_digest(t) for t in await server.tools()}

    v1 = asyncio.run(digests(stdio()))
    v2 = asyncio.run(digests(stdio(env={"MCP_TEST_VARIANT": "v2"})))  # lookup's description changed, fail dropped
    assert sorted(v1) == ["add", "big", "crash", "fail", "hang", "lookup", "pid", "whoami"]
    assert changed_tools(v1, v2) == ["'fail' removed", "'lookup' changed"]
    assert changed_tools(v2, v1) == ["'fail' added", "'lookup' changed"]
    assert changed_tools(v1, v1) == []


# ---- bad input, refused at construction ----
@pytest.mark.parametrize("kw, error, message", [
    ({}, ConfigError, "MCPServer: command=None is invalid: exactly one of command=[...] (a subprocess over stdio) or "
                      "url='http://...' (streamable HTTP)"),
    ({"command": ["python"], "url": "http://x/mcp"}, ConfigError, "exactly one of command=[...]"),
    ({"command": "python server.py"}, ConfigTypeError, "MCPServer: command='python server.py' is invalid: a non-empty "
                                                       "list of strings, the program first"),
    ({"command": []}, ConfigTypeError, "command=[] is invalid"),
    ({"url": "127.0.0.1:8000/mcp"}, ConfigError, "url='127.0.0.1:8000/mcp' is invalid: an http:// or https:// URL"),
    ({"command": ["python"], "env": {"DEBUG": 1}}, ConfigTypeError, "env={'DEBUG': 1} is invalid: a dict of strings"),
    ({"url": "http://x/mcp", "cwd": "/tmp"}, ConfigError, "cwd='/tmp' is invalid: only for a command=[...] server"),
    ({"command": ["python"], "startup_timeout_s": 0}, ConfigError, "startup_timeout_s=0 is invalid"),
])
def test_bad_arguments_are_refused_saying_what_is_allowed(kw, error, message):
    with pytest.raises(error) as exc:
        MCPServer(**kw)
    assert message in str(exc.value)


def test_importing_fsmchat_and_the_mcp_module_does_not_import_the_sdk():
    code = ("import sys, fsmchat, fsmchat.speakers.mcp\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'mcp'))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout == "[]\n"


def test_a_server_whose_event_loop_ended_without_leaving_the_context_starts_again_in_a_new_one():
    server = stdio()

    async def enter_and_abandon():
        await server.start()  # never stopped: asyncio.run cancels the connection's task when the loop ends
        return int(await server.call_tool("pid"))

    async def use_again():
        async with server:
            return int(await server.call_tool("pid"))

    first = asyncio.run(enter_and_abandon())
    second = asyncio.run(use_again())
    assert first != second and gone(first) and gone(second)
