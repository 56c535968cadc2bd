"""Per-request client CPU against the conversation's length: one fast-path agent's request at a
history of 10 and of 200 messages, against the floor posting the same body with ``aiohttp`` and
``json``, both in this process, interleaved, against a local OpenAI-compatible server in a child
process (its CPU is not counted). The figure is CPU per request (``time.process_time``); the ratio
at 200 against the ratio at 10, and fsmchat's CPU above raw's at each, say whether fsmchat's own
per-request work grows with history (the turns read a view of a ``Transcript``, as a run's do).

    .venv/bin/python bench/client_history.py [--quick]
"""
from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cli_args, machine_line, median  # noqa: E402
from compare import server, serve_with  # noqa: E402

HISTORIES = (10, 200)
REQUESTS = 200
REPLY = "Noted."
NAMES = ("Analyst", "Critic", "Writer")


def answer(req: dict[str, Any]) -> Any:
    from support.openai_server import text

    return text(REPLY)


def transcript(n: int) -> list[Any]:
    from fsmchat.models import Message

    rows = [Message(role="User", content="Plan a picnic for twelve people.")]
    rows += [Message(role=NAMES[i % 3], content=f"Point {i}: bring sandwiches, lemonade and a blanket.")
             for i in range(n - 1)]
    return rows


async def fsmchat_requests(api_base: str, model: str, n: int, count: int) -> float:
    from fsmchat import Agent, Transcript
    from fsmchat.speakers import Turn

    agent = Agent("Analyst", system_prompt="Be brief.", model="openai/" + model, api_base=api_base,
                  api_key="sk-bench", num_retries=0, timeout=60)
    rows = Transcript(transcript(n))  # as a run's turns read it: a view of the run's transcript per turn
    await agent.reply(Turn(agent="Analyst", transcript=rows.view(), instruction="Your turn."))  # warm
    c0 = time.process_time()
    for _ in range(count):
        assert await agent.reply(Turn(agent="Analyst", transcript=rows.view(), instruction="Your turn.")) == REPLY
    return (time.process_time() - c0) / count


async def raw_requests(api_base: str, model: str, n: int, count: int) -> float:
    import aiohttp
    from fsmchat.speakers import Turn

    body = {"model": model, "messages": Turn(agent="Analyst", transcript=transcript(n),
                                             instruction="Your turn.").request_messages("Be brief.")}
    url, headers = api_base + "/chat/completions", {"Content-Type": "application/json",
                                                    "Authorization": "Bearer sk-bench"}
    async with aiohttp.ClientSession() as http:
        async def one() -> str:
            async with http.post(url, data=json.dumps(body), headers=headers) as resp:
                return str(json.loads(await resp.read())["choices"][0]["message"]["content"])

        await one()  # warm
        c0 = time.process_time()
        for _ in range(count):
            assert await one() == REPLY
        return (time.process_time() - c0) / count


def main() -> None:
    args = cli_args(__doc__, "3 repetitions instead of 7")
    reps = 3 if args.quick else 7
    per: dict[tuple[str, int], list[float]] = {}
    with server(0.0, __file__) as srv:
        for rep in range(reps):
            for n in HISTORIES:
                for case in (("fsmchat", "raw") if rep % 2 == 0 else ("raw", "fsmchat")):
                    go = fsmchat_requests if case == "fsmchat" else raw_requests
                    per.setdefault((case, n), []).append(asyncio.run(go(srv.api_base, f"h{rep}-{n}-{case}", n,
                                                                         REQUESTS)))
    print(machine_line(reps))
    print("| history | fsmchat µs/request | raw µs/request | fsmchat above raw, µs | ratio, median (range) |\n"
          "| ---: | ---: | ---: | ---: | ---: |")
    for n in HISTORIES:
        ratios = [f / r for f, r in zip(per[("fsmchat", n)], per[("raw", n)])]
        above = [(f - r) * 1e6 for f, r in zip(per[("fsmchat", n)], per[("raw", n)])]
        print(f"| {n} | {median(per[('fsmchat', n)]) * 1e6:.0f} | {median(per[('raw', n)]) * 1e6:.0f} | "
              f"{median(above):.0f} | {median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |")


if __name__ == "__main__":
    if "--serve" in sys.argv:
        serve_with(answer)
    else:
        main()
