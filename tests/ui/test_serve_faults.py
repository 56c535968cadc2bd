"""``fsmchat serve`` in front of a model that fails and is slow: a 429 (retried) and then a slow
answer, with two SSE clients attached to the run's stream. Both read the same events to the same
``end``; the run finishes with the reply; the model was asked exactly twice."""
import threading

import httpx

from fsmchat import Agent, RoundRobinSwarm
from fsmchat.ui import serve as fserve
from support.openai_server import OpenAIServer, delayed, error, text
from support.ui_runs import sse_events


def test_a_429_then_a_slow_model_behind_serve_with_two_sse_clients_attached(tmp_path):
    with OpenAIServer([error(429, "slow down", retry_after=0), delayed(0.5, text("Late, but here."))],
                      max_lifetime=60) as model:
        def relay():
            return RoundRobinSwarm(agents=[Agent("alice", model="openai/test-model", api_base=model.url + "/v1",
                                                 api_key="sk-test", num_retries=1, timeout=30)], max_loops=1)

        running = fserve.start(tmp_path / "runs.db", {"relay": relay})
        try:
            with httpx.Client(base_url=running.url, timeout=60) as client:
                started = client.post("/api/runs", json={"pattern": "relay", "task": "Hello?", "run_id": "slow"})
                assert started.status_code == 202
                seen: dict[int, list] = {}

                def watch(i):
                    with httpx.Client(base_url=running.url, timeout=60) as own:
                        seen[i] = sse_events(own, "slow")

                watchers = [threading.Thread(target=watch, args=(i,)) for i in range(2)]
                for w in watchers:
                    w.start()
                for w in watchers:
                    w.join(120)
                assert sorted(seen) == [0, 1]
                messages = [[(d["role"], d["content"]) for k, d in events if k == "message"] for events in seen.values()]
                assert messages == [[("User", "Hello?"), ("alice", "Late, but here.")]] * 2
                ends = [events[-1] for events in seen.values()]
                assert ends == [("end", {"run_id": "slow", "stop_reason": "max_loops", "waiting": False})] * 2
        finally:
            running.stop()
        assert len(model.requests) == 2  # the 429 once, then the slow answer: no request lost or repeated
