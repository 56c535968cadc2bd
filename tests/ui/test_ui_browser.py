"""The run viewer in a real browser: Debian's headless Chromium (``make test`` installs ``chromium`` and
``chromium-driver``), driven by Selenium with the driver's path given, so nothing is downloaded.

A scripted GroupChat and a flow with a Discussion are checkpointed into a store the viewer serves on a
free 127.0.0.1 port; a third run executes in another process while its page is open, advanced one turn
at a time by lines the test writes to its stdin. Waits are for conditions on the page, never fixed sleeps.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fsmchat import Bid, GroupChat, RoundRobinSwarm
from fsmchat.store.checkpoint import SqliteCheckpointer
from fsmchat.testing import ScriptedModel
from support.ui_runs import LIVE_SCRIPT, XSS, flow_run, group_chat_run, store_of
from support.browser import WAIT, WIDTH, browser, current, js, until  # noqa: E402,F401 - the browser fixture; skips without Chromium

from selenium import webdriver  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

from fsmchat.ui import write_report  # noqa: E402
from fsmchat.ui.server import start  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "docs" / "viewer.png"
RUNS_SHOT, RUN_SHOT = ROOT / "docs" / "viewer-runs.png", ROOT / "docs" / "viewer-run.png"


@pytest.fixture(scope="module")
def viewer(tmp_path_factory):
    db = store_of(tmp_path_factory.mktemp("viewer") / "runs.db")
    running = start(db)
    yield running.url, db
    running.stop()


def bids(browser):
    return js(browser, """return [...document.querySelectorAll('#bids tbody tr')].map((tr) =>
        [...tr.children].map((td) => td.textContent).concat(tr.classList.contains('winner') ? ['winner'] : []));""")


def test_the_runs_list_shows_both_runs(browser, viewer):
    url, _ = viewer
    browser.get(url + "/")
    rows = until(browser, "const r = [...document.querySelectorAll('#runs tbody tr')]; "
                          "return r.length ? r.map((tr) => [tr.dataset.runId, tr.dataset.status]) : null;")
    assert rows == [["flow-1", "finished"], ["chat-1", "finished"]]
    cells = js(browser, "return [...document.querySelectorAll('#runs tbody tr:last-child td')].map((td) => td.textContent)")
    assert cells[1].startswith("GroupChat") and cells[4:9] == ["lull", "3", "9", "135", "$0"]
    Select(browser.find_element(By.ID, "status-filter")).select_by_value("failed")
    assert until(browser, "return document.getElementById('none-shown')?.textContent") == "No failed runs."


def keep_screenshot(browser, path, whole=False):
    """Save the page (``whole``: all of it, not only the window) as ``path`` (a README picture) when asked
    (FSMCHAT_UPDATE_SCREENSHOT) or missing."""
    shot = path.with_suffix(".new.png")
    size = browser.get_window_size()
    if whole:
        browser.set_window_size(size["width"], js(browser, "return document.documentElement.scrollHeight") + 150)
    try:
        browser.save_screenshot(str(shot))
    finally:
        browser.set_window_size(size["width"], size["height"])
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if os.environ.get("FSMCHAT_UPDATE_SCREENSHOT") or not path.exists():
        shot.replace(path)
    else:
        shot.unlink()


LONG_TASK = "Which of these should the team ship first, given the budget and the deadline? " * 4


def test_the_runs_table_fits_the_window(browser, tmp_path):
    """A realistic list (long ids, long tasks, flows and chats) is no wider than a 1,400 px window."""
    def long_chat(cp):
        m = ScriptedModel({"a": [Bid(0.9, "first"), Bid(0.0, "")], "b": [Bid(0.1, ""), Bid(0.0, "")]})
        chat = GroupChat(agents=[m.agent("a"), m.agent("b")], max_loops=4,
                         name="quarterly_planning_council_with_every_department_head")
        return chat.execute(LONG_TASK, checkpoint=cp, run_id="0f8e2c1b6a4d4e7f9b3a5c2d1e0f9a8b" * 2)
    db = store_of(tmp_path / "wide.db", runs=(group_chat_run, flow_run, long_chat))
    running = start(db)
    try:
        browser.get(running.url + "/")
        until(browser, "return document.querySelectorAll('#runs tbody tr').length === 3")
        table, page, window = js(browser, "return [document.getElementById('runs').scrollWidth, "
                                          "document.documentElement.scrollWidth, window.innerWidth]")
        assert window == WIDTH and table <= window and page <= window, (table, page, window)
        keep_screenshot(browser, RUNS_SHOT)
    finally:
        running.stop()


def section_texts(browser):
    """The visible text of each section below the transcript, by heading (as a reader sees it)."""
    until(browser, "return document.getElementById('errors') !== null")
    out = {}
    for h2 in browser.find_elements(By.CSS_SELECTOR, "#app > h2"):
        body = h2.find_element(By.XPATH, "following-sibling::*[1]")
        out[h2.text] = body.text
    return out


def test_every_section_below_the_transcript_shows_its_text(browser, viewer):
    url, _ = viewer
    browser.get(url + "/runs/chat-1")
    texts = section_texts(browser)
    assert list(texts) == ["Errors", "Events", "Limits", "Usage", "Config (secrets masked)"]
    assert texts["Errors"] == "No errors."
    assert '"event": "invalid_bid"' in texts["Events"] and '"agent": "c"' in texts["Events"]
    assert texts["Limits"] == "No limits set."
    assert '"calls": 9' in texts["Usage"] and '"total_tokens": 135' in texts["Usage"]
    assert '"kind": "group_chat"' in texts["Config (secrets masked)"]
    assert "[object " not in browser.find_element(By.ID, "app").text


def test_a_runs_limits_show_on_its_page_and_in_its_report(browser, tmp_path):
    def limited(cp):
        m = ScriptedModel({"a": ["one", "two", "three"], "b": ["uno", "dos", "tres"]})
        swarm = RoundRobinSwarm(agents=[m.agent("a"), m.agent("b")], max_loops=3).with_limits(max_model_calls=3)
        return swarm.execute("Count.", checkpoint=cp, run_id="limited-1")
    db = store_of(tmp_path / "limits.db", runs=(limited,))
    running = start(db)
    try:
        browser.get(running.url + "/runs/limited-1")
        served = section_texts(browser)
        keep_screenshot(browser, RUN_SHOT, whole=True)
    finally:
        running.stop()
    browser.get(write_report(db, "limited-1", tmp_path / "limited.html").as_uri())
    reported = section_texts(browser)
    for texts in (served, reported):
        assert '"max_model_calls": 3' in texts["Limits"]
        assert texts["Events"] == "No events recorded."
        assert '"calls": 3' in texts["Usage"]
        assert '"kind": "round_robin"' in texts["Config (secrets masked)"]
    assert served == reported


def test_the_slider_and_arrow_keys_replay_a_group_chat(browser, viewer):
    url, _ = viewer
    browser.get(url + "/runs/chat-1")
    until(browser, "return document.querySelector('#graph svg .node') !== null")
    assert current(browser)[0] == "stop"  # the page opens at the run's last step
    slider = browser.find_element(By.ID, "slider")
    slider.send_keys(Keys.HOME)
    assert current(browser) == ["seed", "seed->bid", ["Cats or dogs?"]]
    slider.send_keys(Keys.ARROW_RIGHT * 3)
    state, edge, transcript = current(browser)
    assert (state, edge, transcript) == ("post", "post->penalize", ["Cats or dogs?", XSS])  # markup shown as text
    browser.find_element(By.TAG_NAME, "h1").click()  # the arrow keys work anywhere on the page
    webdriver.ActionChains(browser).send_keys(Keys.ARROW_LEFT).perform()
    assert current(browser)[0] == "select"
    assert js(browser, "return window.__pwned === undefined && document.querySelectorAll('#transcript img').length === 0")


def test_a_bid_step_shows_every_agents_bid_and_why_the_winner_won(browser, viewer):
    url, _ = viewer
    browser.get(url + "/runs/chat-1")
    until(browser, "return document.getElementById('slider') !== null")
    js(browser, "window.fsmchatViewer.show(5)")  # the second turn's bid step
    assert current(browser)[:2] == ["bid", "bid->select"]
    assert bids(browser) == [
        ["a", "0.8", "0.5", "a again", "", "0.8 − 0.3 recency penalty (spoke recently) = 0.5; not above the threshold 0.5"],
        ["b", "0.85", "0.85", "b wins turn two", "", "won: the best adjusted bid above the threshold", "winner"],
        ["c", "0", "—", "(silent)", "no tool call (plain text instead of respond)", "silent (no message)"]]
    assert browser.find_element(By.ID, "why").text == ("b won with 0.85, the best recency-adjusted bid strictly "
                                                       "above the threshold 0.5")
    keep_screenshot(browser, SCREENSHOT)  # docs/viewer.png, the README's picture of the run page
    js(browser, "window.fsmchatViewer.show(0)")
    assert js(browser, "return document.getElementById('bid-box').hidden")  # not a bid step: no bid table


def test_a_flow_with_a_discussion_replays_state_by_state(browser, viewer):
    url, _ = viewer
    browser.get(url + "/runs/flow-1")
    slider = WebDriverWait(browser, WAIT).until(lambda b: b.find_element(By.ID, "slider"))
    assert js(browser, "return document.querySelector('#graph svg .cluster title').textContent") == "cluster_discussion"
    slider.send_keys(Keys.HOME)
    assert current(browser) == ["discussion.begin", "discussion.begin->discussion.turn", []]
    slider.send_keys(Keys.ARROW_RIGHT)
    assert current(browser) == ["discussion.turn", "discussion.turn->discussion.check_until", ["too vague"]]
    slider.send_keys(Keys.END)
    assert current(browser)[0] == "end" and current(browser)[2][-1] == "they agreed after two rounds"


def test_the_exported_report_opens_offline_and_shows_the_same(browser, viewer, tmp_path):
    _, db = viewer
    report = write_report(db, "chat-1", tmp_path / "chat.html")
    browser.set_network_conditions(offline=True, latency=0, download_throughput=0, upload_throughput=0)
    try:
        browser.get(report.as_uri())
        slider = WebDriverWait(browser, WAIT).until(lambda b: b.find_element(By.ID, "slider"))
        assert js(browser, "return document.querySelectorAll('#graph svg .node').length") >= 6
        slider.send_keys(Keys.HOME, Keys.ARROW_RIGHT * 3)
        assert current(browser) == ["post", "post->penalize", ["Cats or dogs?", XSS]]
        js(browser, "window.fsmchatViewer.show(5)")
        assert [row[:3] for row in bids(browser)] == [["a", "0.8", "0.5"], ["b", "0.85", "0.85"], ["c", "0", "—"]]
        assert js(browser, "return performance.getEntriesByType('resource').length") == 0  # nothing fetched
        assert js(browser, "return window.__pwned === undefined")
        assert browser.find_elements(By.ID, "home") == []  # no link back to a server
    finally:
        browser.delete_network_conditions()


def test_a_run_executing_in_another_process_updates_live(browser, tmp_path):
    db = tmp_path / "live.db"
    SqliteCheckpointer(db).close()
    running = start(db)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = None
    try:
        browser.get(running.url + "/")
        until(browser, "return document.getElementById('empty') !== null")
        js(browser, "window.__same_page = true")
        proc = subprocess.Popen([sys.executable, "-c", LIVE_SCRIPT, str(db), "live-1"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
        status = until(browser, "return document.querySelector('#runs tr[data-run-id=\"live-1\"]')?.dataset.status")
        assert status == "running" and js(browser, "return window.__same_page === true")  # appeared without a reload
        browser.find_element(By.LINK_TEXT, "live-1").click()
        assert "still executing" in until(browser, "return document.getElementById('live')?.textContent")
        js(browser, "window.__same_page = true")
        proc.stdin.write("turn 1\n")
        proc.stdin.flush()
        until(browser, "return [...document.querySelectorAll('#transcript .content')].some((c) => "
                       "c.textContent === 'first live message')")
        assert js(browser, "return window.__same_page === true")
        assert current(browser)[0] in ("post", "penalize", "bid")  # following the run's newest step
        proc.stdin.write("turn 2\n")
        proc.stdin.close()
        banner = until(browser, "const l = document.getElementById('live'); "
                                "return l.classList.contains('done') ? l.textContent : null;")
        assert "finished while you watched" in banner and "stop reason lull" in banner
        assert js(browser, "return window.__same_page === true")
        assert current(browser)[2] == ["Go live", "first live message", "second live message"]
        assert proc.wait(timeout=WAIT) == 0, proc.stderr.read()
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        running.stop()


@pytest.mark.parametrize("content, shows", [
    (b"", "No runs in this store yet"),
    (b"not an sqlite file\n" * 300, "corrupted or not an SQLite database")])
def test_empty_and_corrupted_stores_show_a_clear_page(browser, tmp_path, content, shows):
    db = tmp_path / "runs.db"
    db.write_bytes(content)
    running = start(db)
    try:
        browser.get(running.url + "/")
        text = until(browser, "return document.getElementById('app').textContent")
        assert shows in text and "Traceback" not in text
    finally:
        running.stop()
