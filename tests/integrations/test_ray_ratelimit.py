"""A rate limit set in the driver is shared by every worker of a Ray batch: one Ray actor holds its
window, so two workers together send no more requests than the limit allows, and a call that
waits for room says so in its run's events. Counted, never timed: the window is an hour, so exactly
``RPM`` requests can ever get through during the test; the chats that get no room wait until their
run's deadline (which only ends their wait) and end there, each with a ``rate_limited`` event.
With a limit per worker process, twice as many requests would reach the server."""
import pytest

ray = pytest.importorskip("ray")

from support.openai_server import OpenAIServer, text  # noqa: E402

from fsmchat import Agent, RateLimit, RoundRobinSwarm, SqliteCheckpointer, rate_limit  # noqa: E402
from fsmchat.patterns.distributed import execute_batch  # noqa: E402

RPM = 3
N = 8


pytestmark = pytest.mark.usefixtures("local_ray")  # tests/integrations/conftest.py


def test_two_workers_share_one_limit_and_a_waiting_call_is_an_event(tmp_path):
    with OpenAIServer(lambda request: text("Noted."), max_lifetime=600) as srv:
        rate_limit(srv.api_base, RateLimit(rpm=RPM, window=3600))
        try:
            chat = RoundRobinSwarm(agents=[Agent("solo", model="openai/test-model", api_base=srv.api_base,
                                                 api_key="sk-test")], max_loops=1).with_limits(deadline_s=3)
            report = execute_batch(chat, [f"note {i}" for i in range(N)], workers=2, max_concurrency_per_worker=4,
                                   chunk_size=2, checkpoint_dir=tmp_path)  # 4 chunks: two per worker
        finally:
            rate_limit(srv.api_base, None)
        assert len(srv.requests) == RPM  # both workers together: the limit, not the limit per worker
    assert sorted({o.worker.split("-")[0] for o in report.outcomes}) == ["0", "1"]  # both workers ran chats
    stops, waited = [], []
    for db in sorted(tmp_path.glob("*.db")):
        cp = SqliteCheckpointer(db)
        for run_id in cp.runs():
            saved = cp.load(run_id)
            stops.append(saved.stop_reason)
            events = (saved.state or {}).get("events") or []
            waited += [e for e in events if e.get("event") == "rate_limited"]
        cp.close()
    assert sorted(stops) == sorted(["max_loops"] * RPM + ["deadline"] * (N - RPM))
    assert len(waited) == N - RPM and {e["limit"] for e in waited} == {srv.api_base}
