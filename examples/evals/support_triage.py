"""An evaluation: 24 support requests, two triage prompts, scored on the answer and on the trajectory.

Each case is a customer's request to a triage agent that hands off to billing (which has a `refund`
tool) or to tech. The dataset (`support_triage.yaml`) says, per case, who must speak in order and
which tool must be called; every case must stop "answered" along a path of the drawn graph, and
an LLM judge grades the reply against a rubric. The two variants differ only in triage's prompt.

    fsmchat eval examples/evals/support_triage.py                 # offline: no key needed
    fsmchat eval examples/evals/support_triage.py --repeat 3 --cassette runs.jsonl
    fsmchat eval examples/evals/support_triage.py --rescore --cassette runs.jsonl   # 0 model calls
    fsmchat eval examples/evals/support_triage.py --model gpt-4o-mini --max-cost 0.50

The run exits 1 when a threshold below is missed, so it can gate CI.
"""
import os
from pathlib import Path

from fsmchat import Agent, Handoff, Handoffs
from fsmchat.evals import Eval, Judge, load_dataset

PROMPTS = {"brief": "You greet customers and route them to the right team.",
           "explicit": "You route each customer: money questions to billing, technical problems to tech."}
THRESHOLDS = {"ToolCalled(refund)": 0.9, "PathInGraph": 1.0}


def refund(order: int) -> str:
    """Refund the duplicate charge of an order."""
    return f"refund issued for order {order}"


def build(triage_prompt: str = PROMPTS["brief"], model: str | None = None) -> Handoffs:
    """The conversation each case runs: triage hands off to billing or tech, which answer."""
    model = model or os.environ.get("FSMCHAT_MODEL") or "offline"
    triage = Agent("triage", model=model, system_prompt=triage_prompt, handoffs=[
        Handoff("billing", description="Charges, invoices, payments and refunds."),
        Handoff("tech", description="Technical problems: errors, crashes, outages, login.")])
    billing = Agent("billing", model=model, system_prompt="You resolve charges and refunds for orders.",
                    tools=[refund])
    tech = Agent("tech", model=model, system_prompt="You fix technical problems step by step.")
    return Handoffs([triage, billing, tech], name="Support-Triage", max_turns=6)


EVAL = Eval(load_dataset(Path(__file__).with_name("support_triage.yaml")), build,
            variants={name: {"triage_prompt": prompt} for name, prompt in PROMPTS.items()},
            evaluators=[Judge("The last reply answers the customer's request.", threshold=0.5)])
