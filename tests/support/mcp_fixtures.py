"""The MCP tests' server (``support/mcp_server.py``, a subprocess): its command, the ``http_server`` and ``fifo`` fixtures, and process checks (not ``mcp.py``: the server script, run from this folder, imports the SDK's ``mcp``)."""
import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

SERVER = Path(__file__).resolve().parent / "mcp_server.py"
COMMAND = [sys.executable, str(SERVER), "stdio"]


def gone(pid: int) -> bool:
    """The process no longer exists (exited and reaped: a zombie would still answer signal 0)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture
def http_server():
    """tests/support/mcp_server.py over streamable HTTP; yields (url, process); stopped after the test."""
    proc = subprocess.Popen([sys.executable, str(SERVER), "http"], stdout=subprocess.PIPE, text=True)
    try:
        ready = proc.stdout.readline()  # printed once its socket listens; "" if it died first
        assert ready.startswith("READY "), f"the test MCP server did not start: {ready!r}"
        yield f"http://127.0.0.1:{int(ready.split()[1])}/mcp", proc
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "hang.fifo"
    os.mkfifo(path)
    return path


async def wait_for_hang(fifo: Path) -> int:
    """Block (in a thread) until the server's ``hang`` tool says it has started; its process id."""
    word, pid = (await asyncio.to_thread(fifo.read_text)).split()
    assert word == "hanging"
    return int(pid)
