"""The viewer answers only to its own names: a page whose DNS name is rebound to 127.0.0.1 sends its
own ``Host`` and gets 421, never the runs. Every response forbids framing. A real server on
127.0.0.1, asked over HTTP with the ``Host`` header set by hand."""
import httpx
import pytest

from fsmchat import RoundRobinSwarm, SqliteCheckpointer, cli
from fsmchat.ui.server import start

FRAMES = {"x-frame-options": "DENY", "content-security-policy": "frame-ancestors 'none'"}


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    db = tmp_path_factory.mktemp("viewer") / "runs.db"

    def host(turn):
        return "Welcome."

    RoundRobinSwarm(agents=[host]).execute("Hello?", checkpoint=SqliteCheckpointer(db), run_id="r1")
    return db


def ask(running, path, host):
    return httpx.get(running.url + path, headers={"Host": host}, timeout=30)


def framing(response):
    return {k: response.headers.get(k) for k in FRAMES}


def test_a_foreign_host_gets_421_and_no_runs(store):
    running = start(store)
    try:
        for path in ("/api/runs", "/api/runs/r1", "/", "/runs/r1"):
            r = ask(running, path, "evil.example")
            assert r.status_code == 421, (path, r.status_code)
            assert "Welcome." not in r.text and "r1" not in r.text
            assert r.text.startswith("fsmchat ui: this viewer answers only to ")
            assert "--allow-host evil.example" in r.text
            assert framing(r) == FRAMES
        port = running.url.rsplit(":", 1)[1]
        assert ask(running, "/api/runs", f"evil.example:{port}").status_code == 421  # the right port does not help
        assert ask(running, "/api/runs", "localhost:1").status_code == 421  # a localhost name on another port
        assert ask(running, "/api/runs", "").status_code in (400, 421)  # no Host at all
    finally:
        running.stop()


def test_the_served_address_and_localhost_names_are_answered(store):
    running = start(store)
    try:
        port = running.url.rsplit(":", 1)[1]
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}", f"[::1]:{port}"):
            r = ask(running, "/api/runs", host)
            assert r.status_code == 200, host
            assert [run["run_id"] for run in r.json()["runs"]] == ["r1"]
            assert framing(r) == FRAMES
        missing = ask(running, "/api/runs/nope", f"127.0.0.1:{port}")
        assert missing.status_code == 404 and framing(missing) == FRAMES  # every response, errors too
        page = httpx.get(running.url + "/runs/r1", timeout=30)  # what a browser sends: Host as in the URL
        assert page.status_code == 200 and framing(page) == FRAMES
    finally:
        running.stop()


def test_allow_host_adds_names(store):
    running = start(store, allow_hosts=["viewer.example", "proxy.example:9000"])
    try:
        assert ask(running, "/api/runs", "viewer.example").status_code == 200  # any port when none is given
        assert ask(running, "/api/runs", "viewer.example:443").status_code == 200
        assert ask(running, "/api/runs", "proxy.example:9000").status_code == 200
        assert ask(running, "/api/runs", "proxy.example:9001").status_code == 421
        assert ask(running, "/api/runs", "proxy.example").status_code == 421
        assert ask(running, "/api/runs", "evil.example").status_code == 421
    finally:
        running.stop()


def test_the_cli_takes_allow_host_repeatedly():
    args = cli.parser().parse_args(["ui", "--db", "x.db", "--allow-host", "a.example", "--allow-host", "b.example:80"])
    assert args.allow_host == ["a.example", "b.example:80"]
    assert cli.parser().parse_args(["ui", "--db", "x.db"]).allow_host is None


@pytest.mark.parametrize("name", ["http://viewer.example", "viewer.example/runs", "two words", "", "viewer.example:x"])
def test_a_malformed_allow_host_is_refused_before_serving(store, name):
    from fsmchat.errors import ConfigError

    with pytest.raises(ConfigError, match="--allow-host"):
        start(store, allow_hosts=[name])
