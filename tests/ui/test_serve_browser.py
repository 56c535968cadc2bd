"""End to end in a real browser: a run started over HTTP (httpx) against ``fsmchat serve`` is watched
on the viewer's page of the same server in headless Chromium, its messages appearing as the run
goes. The run's model answers one turn each time the test releases it; every wait is for a
condition on the page, never a fixed sleep."""
import threading

import httpx
import pytest

from support.browser import WAIT, browser, current, until  # noqa: F401 - the browser fixture; skips without Chromium

from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from fsmchat import RoundRobinSwarm  # noqa: E402
from fsmchat.testing import Delay, FunctionModel  # noqa: E402
from fsmchat.ui import serve as fserve  # noqa: E402

GATE = threading.Semaphore(0)


def reply(req):
    """One answer per release of ``GATE``; until then the model call waits (polling, in the call)."""
    if GATE.acquire(blocking=False):
        return f"{req.agent} answers turn {len(req.messages)}."
    return Delay(0.02, reply)


def gated():
    model = FunctionModel(reply, id="gated-browser")
    return RoundRobinSwarm(agents=[model.agent("Planner"), model.agent("Critic")], max_loops=1)


@pytest.fixture
def served(tmp_path):
    running = fserve.start(tmp_path / "runs.db", {"gated": gated})
    yield running.url
    for _ in range(4):
        GATE.release()  # a run still waiting ends before the server stops
    running.stop()


def test_a_run_started_over_http_is_watched_live_in_the_viewer(browser, served):  # noqa: F811
    with httpx.Client(base_url=served, timeout=60) as client:
        started = client.post("/api/runs", json={"pattern": "gated", "task": "Ship it on Friday?", "run_id": "web"})
        assert started.status_code == 202
    browser.get(served + "/runs/web")
    until(browser, "return document.querySelector('#transcript') !== null")
    WebDriverWait(browser, WAIT).until(lambda b: current(b)[2] == ["Ship it on Friday?"])
    GATE.release()
    WebDriverWait(browser, WAIT).until(
        lambda b: current(b)[2] == ["Ship it on Friday?", "Planner answers turn 2."])
    GATE.release()
    WebDriverWait(browser, WAIT).until(
        lambda b: current(b)[2] == ["Ship it on Friday?", "Planner answers turn 2.", "Critic answers turn 3."])
    status = until(browser, "const s = document.body.innerText; return s.includes('finished') ? 'finished' : null")
    assert status == "finished"
    runs = httpx.get(served + "/api/runs").json()["runs"]
    assert [(r["run_id"], r["status"], r["messages"]) for r in runs] == [("web", "finished", 3)]
