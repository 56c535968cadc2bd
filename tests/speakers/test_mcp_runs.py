"""MCP servers as agents' tool sources in pattern runs: a scripted agent of a RoundRobinSwarm calls the
tools of a real MCP server (tests/support/mcp_server.py, a subprocess over stdio or streamable HTTP). The
server starts with the run and is gone when the run ends, fails or is cancelled; a server that dies
mid-run is the call's error result (or ends the run, per on_tool_error); the tools offered are kept
with the checkpoint and a resume against changed tools is refused before any model call; configs
hold MCP servers only with trusted=True."""
import asyncio
import sys

import pytest

from fsmchat import Approve, Bid, Flow, GroupChat, MCPServerError, MemoryCheckpointer, RoundRobinSwarm, \
    UntrustedReference, from_config, parallel
from fsmchat.speakers.mcp import MCPServer
from fsmchat.speakers.tools import ToolError
from fsmchat.testing import ScriptedModel, ToolCall, assert_trace_is_path

from support.mcp_fixtures import COMMAND, fifo, gone, http_server, wait_for_hang  # noqa: F401 (fixtures)

pytest.importorskip("mcp", reason="the mcp extra is not installed (pip install -e '.[mcp]')")

TASK = "What is the capital of France?"
TOOL_NAMES = ["add", "lookup", "fail", "hang", "crash", "whoami", "pid", "big"]


def capitals(**kw) -> MCPServer:
    return MCPServer(command=COMMAND, name="capitals", **kw)


def swarm(model, server, max_loops=1, **agent_kw):
    return RoundRobinSwarm(agents=[model.agent("a", tools=[server], **agent_kw), model.agent("b")],
                           max_loops=max_loops)


def execute(chat, task, server):
    """``chat.aexecute(task)``; the result, and whether ``server`` still ran when it returned (checked in the
    run's own event loop: when ``asyncio.run`` ends it cancels what is left, which would hide a leak)."""
    async def main():
        result = await chat.aexecute(task)
        return result, server.running

    return asyncio.run(main())


def calls_of(result, role):
    [message] = [m for m in result.transcript if m.role == role]
    return message.metadata["tool_calls"]


def test_an_agent_calls_an_mcp_servers_tools_in_a_round_robin_run():
    model = ScriptedModel({"a": [ToolCall("pid", {}), ToolCall("lookup", {"country": "France"}, id="c2"),
                                 "The capital of France is Paris."],
                           "b": ["Agreed: Paris."]})
    server = capitals()
    chat = swarm(model, server)
    result, running = execute(chat, TASK, server)
    assert result.ok and result.stop_reason == "max_loops"
    assert result.path == ["seed", "a", "tools_a", "a", "tools_a", "a", "b", "stop"]
    assert_trace_is_path(chat.graph, result)
    assert [(m.role, m.content) for m in result.transcript] == [
        ("User", TASK), ("a", "The capital of France is Paris."), ("b", "Agreed: Paris.")]
    pid_call, lookup = calls_of(result, "a")
    assert (pid_call["name"], pid_call["status"]) == ("pid", "done")
    assert {k: lookup[k] for k in ("id", "name", "arguments", "status", "result")} == {
        "id": "c2", "name": "lookup", "arguments": {"country": "France"}, "status": "done", "result": "Paris"}
    first, _, last = model.requests_of("a")
    assert [t["function"]["name"] for t in first.tools] == TOOL_NAMES  # the server's tools, as listed
    assert last.messages[-2:] == [
        {"role": "assistant", "tool_calls": [{"id": "c2", "type": "function",
                                              "function": {"name": "lookup", "arguments": '{"country": "France"}'}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "Paris"}]
    assert gone(int(pid_call["result"])) and running is False  # started for the run, stopped when it ended


def test_an_mcp_error_result_goes_back_to_the_model_as_the_calls_result():
    model = ScriptedModel({"a": [ToolCall("fail", {"reason": "no atlas"}), "I could not look it up."], "b": ["OK."]})
    result = swarm(model, capitals()).execute(TASK)
    assert result.ok
    [call] = calls_of(result, "a")
    assert (call["status"], call["error"]) == ("error", "MCPToolError: MCP tool 'fail' of server 'capitals' failed: "
                                                        "Error executing tool fail: fail was asked to fail: no atlas")
    assert model.requests_of("a")[1].messages[-1]["content"] == f"error: {call['error']}"


def test_a_failing_run_stops_the_server():
    model = ScriptedModel({"a": [ToolCall("pid", {}), ToolCall("fail", {"reason": "no atlas"}, id="c2")], "b": []})
    server = capitals()
    result, running = execute(swarm(model, server, on_tool_error="stop"), TASK, server)
    assert result.stop_reason == "error" and isinstance(result.error, ToolError)
    assert str(result.error) == ("tool 'fail' of agent 'a' failed: MCPToolError: MCP tool 'fail' of server 'capitals' "
                                 "failed: Error executing tool fail: fail was asked to fail: no atlas")
    pid = int(model.requests_of("a")[1].messages[-1]["content"])  # the pid call's result, as the model read it
    assert gone(pid) and running is False


@pytest.mark.parametrize("on_tool_error", ["return", "stop"])
def test_a_server_that_dies_mid_run_is_named_with_its_stderr(on_tool_error):
    died = ("MCPServerError: MCP server 'capitals' (command {}) closed the connection during the call to tool "
            "'crash'; its stderr ends with:\ncrash: exiting with status 3").format(COMMAND)
    model = ScriptedModel({"a": [ToolCall("crash", {}), ToolCall("add", {"a": 1, "b": 2}, id="c2"),
                                 "The atlas server is down."], "b": ["OK."]})
    server = capitals()
    result = swarm(model, server, on_tool_error=on_tool_error).execute(TASK)
    assert not server.running
    if on_tool_error == "stop":
        assert result.stop_reason == "error" and isinstance(result.error, ToolError)
        assert str(result.error) == f"tool 'crash' of agent 'a' failed: {died}"
        assert isinstance(result.error.__cause__, MCPServerError) and result.error.__cause__.server == "capitals"
        return
    assert result.ok and result.transcript[-2].content == "The atlas server is down."
    crash, add = calls_of(result, "a")
    assert (crash["status"], crash["error"]) == ("error", died)
    assert add["status"] == "error" and add["error"].startswith("MCPServerError: MCP server 'capitals' (command ")
    assert "'add'" in add["error"]


def test_a_cancelled_run_leaves_no_server_process(fifo):
    model = ScriptedModel({"a": [ToolCall("hang", {})], "b": []})
    server = capitals(env={"MCP_TEST_FIFO": str(fifo)})
    chat = swarm(model, server)

    async def main():
        run = asyncio.create_task(chat.aexecute(TASK))
        pid = await wait_for_hang(fifo)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        return pid, gone(pid), server.running

    pid, is_gone, running = asyncio.run(main())
    assert is_gone and running is False


def test_an_http_mcp_server_serves_a_run(http_server):
    url, _ = http_server
    model = ScriptedModel({"a": [ToolCall("add", {"a": 20, "b": 22}), "It is 42."], "b": ["Yes."]})
    result = swarm(model, MCPServer(url=url, name="calc")).execute("What is 20 + 22?")
    assert result.ok and [c["result"] for c in calls_of(result, "a")] == ["42"]


# ---- the tools offered are stored with the run; a resume against changed tools is refused ----
def test_a_resume_against_a_server_whose_tools_changed_is_refused_naming_them():
    model = ScriptedModel({"a": [ToolCall("lookup", {"country": "France"}), "Paris.",
                                 ToolCall("lookup", {"country": "Japan"}), "Tokyo."],
                           "b": ["And Japan?"]})

    def chat(server):
        return RoundRobinSwarm(agents=[model.agent("a", tools=[server]), model.agent("b")], max_loops=2,
                               interrupt_before=["b"])

    cp = MemoryCheckpointer()
    first = chat(capitals()).execute(TASK, checkpoint=cp, run_id="r")
    assert first.stop_reason == "interrupted" and first.path == ["seed", "a", "tools_a", "a", "before_b"]
    assert model.calls() == 2
    changed = capitals(env={"MCP_TEST_VARIANT": "v2"})  # lookup's description changed, fail dropped
    with pytest.raises(ToolError) as refused:
        chat(changed).resume("r", cp, input=Approve())
    assert str(refused.value) == ("tool source 'capitals' offers other tools than when this run was checkpointed "
                                  "('fail' removed, 'lookup' changed); the run does not resume against them: restore "
                                  "the source's tools, or start a new run")
    assert model.calls() == 2 and not changed.running  # no model call; the server it started is stopped
    again = chat(capitals()).resume("r", cp, input=Approve())  # the same tools: the run goes on
    assert again.path[5:] == ["b", "a", "tools_a", "a", "before_b"]
    assert [m.content for m in again.transcript] == [TASK, "Paris.", "And Japan?", "Tokyo."]


# ---- configs ----
def test_a_config_holds_an_mcp_server_only_when_trusted():
    server = capitals(env={"MCP_TEST_VARIANT": "v1", "GITHUB_TOKEN": "ghp_secret"}, idempotent=["lookup"])
    cfg = RoundRobinSwarm(agents=[ScriptedModel({"a": []}).agent("a", tools=[server])]).to_config()
    [entry] = cfg.model_dump()["agents"][0]["tools"]
    assert entry == {"type": "mcp_server", "name": "capitals", "command": COMMAND, "env": {"MCP_TEST_VARIANT": "v1"},
                     "idempotent": ["lookup"]}  # the token is not written
    rule = (f"agent 'a' tools: refused \"MCP server 'capitals' (command {COMMAND!r})\": an MCP server starts a process "
            "(or connects to a URL) when a run uses it, so a config may hold one only with trusted=True")
    for allow in ([], ["tests", "mcp_server"]):
        with pytest.raises(UntrustedReference) as refused:
            from_config(cfg, allow=allow)
        assert str(refused.value) == rule
    [built] = from_config(cfg, trusted=True).agents[0].tools
    assert isinstance(built, MCPServer) and built.to_config() == entry and built is not server


def test_a_batch_that_holds_the_server_shares_one_process_between_its_runs():
    model = ScriptedModel({"a": [ToolCall("pid", {}), "Checked."] * 3, "b": ["OK."] * 3})
    server = capitals()
    chat = swarm(model, server)

    async def main():
        async with server:  # held open: each run's start and stop only count
            outputs = await chat.arun_batch([TASK] * 3, max_concurrency=1)
            still = server.running
        return outputs, still

    outputs, still = asyncio.run(main())
    assert len(outputs) == 3 and still is True
    pids = {r.messages[-1]["content"] for r in model.requests_of("a")[1::2]}  # each run's pid call result
    assert len(pids) == 1 and gone(int(pids.pop())) and not server.running


def test_a_server_that_cannot_start_ends_the_run_naming_the_command_before_any_model_call():
    model = ScriptedModel({"a": ["unused"], "b": ["unused"]})
    result = swarm(model, MCPServer(command=["no-such-mcp-server"], name="atlas")).execute(TASK)
    assert result.stop_reason == "error" and isinstance(result.error, MCPServerError)
    assert str(result.error) == ("MCP server 'atlas' (command ['no-such-mcp-server']) cannot start: no program "
                                 "'no-such-mcp-server' on PATH")
    assert model.calls() == 0 and [m.role for m in result.transcript] == ["User"]


def test_group_chat_bidders_sharing_one_mcp_server_call_it_before_they_bid():
    model = ScriptedModel({"a": [ToolCall("lookup", {"country": "France"}), Bid(0.9, "Paris, per the atlas.")],
                           "b": [ToolCall("pid", {}), Bid(0.2, "Not sure.")]})
    server = capitals()  # one server, two bidders: started once, their calls concurrent on one session
    chat = GroupChat(agents=[model.agent("a", tools=[server]), model.agent("b", tools=[server])], max_loops=2)
    result, running = execute(chat, TASK, server)
    assert result.ok and result.path == ["seed", "bid", "tools_bid", "bid", "select", "post", "penalize", "stop"]
    assert [(m.role, m.content) for m in result.transcript] == [("User", TASK), ("a", "Paris, per the atlas.")]
    assert [(c["name"], c["result"]) for c in calls_of(result, "a")] == [("lookup", "Paris")]
    pid = int(model.requests_of("b")[1].messages[-1]["content"])
    assert gone(pid) and running is False


def test_a_call_past_its_timeout_is_an_error_result_and_the_server_serves_the_next_call():
    model = ScriptedModel({"a": [ToolCall("hang", {}), ToolCall("add", {"a": 1, "b": 2}, id="c2"), "1 + 2 = 3."],
                           "b": ["OK."]})
    result = swarm(model, capitals(timeout_s=0.5)).execute("What is 1 + 2?")  # hang never returns
    assert result.ok
    hang, add = calls_of(result, "a")
    assert hang["status"] == "error" and hang["error"].startswith("timed out: ")
    assert (add["status"], add["result"]) == ("done", "3")  # the cancelled request left the session usable


def test_an_oversized_mcp_result_is_cut_at_the_servers_max_result_chars_and_the_run_goes_on():
    model = ScriptedModel({"a": [ToolCall("big", {"chars": 3_000_000}, id="b1"), ToolCall("add", {"a": 1, "b": 2}),
                                 "Done."], "b": ["OK."]})
    result = swarm(model, capitals(max_result_chars=2000)).execute("Get it all.")
    assert result.ok
    big, add = calls_of(result, "a")
    assert big["result"] == "x" * 2000 + ("\n[truncated by fsmchat: the result had 3,000,000 characters, the first "
                                          "2,000 are shown (Tool(max_result_chars=2000))]")
    assert model.requests_of("a")[1].messages[-1]["content"] == big["result"]  # what the model read
    assert (add["status"], add["result"]) == ("done", "3")  # the server serves the next call
    assert [(e["event"], e["chars"], e["kept"]) for e in result.events if e["event"] == "tool_result_truncated"] == [
        ("tool_result_truncated", 3_000_000, 2000)]
    assert MCPServer(command=COMMAND).max_result_chars == 50_000


def test_parallel_flow_branches_share_the_runs_mcp_server_and_it_stops_with_the_run():
    model = ScriptedModel({"a": [ToolCall("pid", {}), "Checked a."], "b": [ToolCall("pid", {}), "Checked b."]})
    server = capitals()
    flow = Flow(steps=[parallel([model.agent("a", tools=[server]), model.agent("b", tools=[server])])])
    result, running = execute(flow, TASK, server)
    assert result.ok and running is False  # before: each branch started it, and nothing stopped it
    pids = {int(model.requests_of(agent)[1].messages[-1]["content"]) for agent in ("a", "b")}
    assert len(pids) == 1 and gone(pids.pop())
