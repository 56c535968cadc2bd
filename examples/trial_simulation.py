"""swarms' TrialSimulation (alternate_debates/trial_simulation.py, the newer revision) as an
AgentFlow: a loop over the user's phase list whose body is the judge's phase opener, then a route
on the phase name (exact, case-sensitive): opening (prosecution, then defense answering it),
testimony (each witness, stored per witness index), cross (per witness: prosecution examines that
witness's latest testimony, defense redirects), closing (both closings, then the verdict on the
last two rows). Any other name runs only the judge's opener.
Calls = 3 + W + P + 2n_opening + W n_testimony + 2W n_cross + 3n_closing (default phases 12 + 4W;
the demo, W = 1, makes 16).

Reproduced quirks: unknown phase names are accepted and repeats allowed; testimony/cross without
witnesses run only the opener; a repeated testimony overwrites the stored one and a later cross
uses the latest; an empty testimony is still cross-examined; witnesses see only the case; the
prosecution's closing prompt is constant; every judge opener is recorded but given to nobody.
Deviations: bad input is refused when the flow is built (same messages), not at run(); default
phases are not written back (there is no instance; the flow holds them); memories last one run.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from _common import intro, report  # noqa: E402

from fsmchat import Agent, AgentFlow, Task, loop, route  # noqa: E402

PHASES = ["opening", "testimony", "cross", "closing"]
CASE, PREV = "{{input}}", "{{previous_output}}"  # the case never changes; the step before's reply

TASK = "The State v. Doe: theft of a bicycle from the town square on 3 March."  # `fsmchat run` runs it (--task replaces it)


def trial_simulation(prosecution=None, defense=None, judge=None, witnesses=None, phases=None,
                     output_type="str-all-except-first") -> AgentFlow:
    if not prosecution or not defense or not judge:
        raise ValueError("Prosecution, defense, and judge agents are all required.")
    phases, witnesses = list(phases or PHASES), list(witnesses or [])
    if not all(isinstance(p, str) for p in phases):
        raise TypeError(f"phases must be a list of phase names (str), got {phases!r}")
    if witnesses and "cross" in phases and ("testimony" not in phases or
                                            phases.index("cross") < phases.index("testimony")):
        raise ValueError("The testimony phase must precede cross-examination.")
    pr, de, j = prosecution, defense, judge
    roster = f"Prosecution: {pr.name}. Defense: {de.name}. Judge: {j.name}." + \
        (f" Witnesses: {', '.join(w.name for w in witnesses)}." if witnesses else "")
    setup = [intro(a, f"You are {a.name}, {role} in this trial. {roster}")  # the reply is thrown away, kept in memory
             for a, role in [(j, "the judge"), (pr, "the prosecution"), (de, "the defense"),
                             *[(w, "a witness") for w in witnesses]]]
    phase_steps = {
        "opening": [Task(agent=pr, action=f"Give opening statement for: {CASE}"),
                    Task(agent=de, action=f"Give opening statement responding to: {PREV}")],
        "testimony": [Task(agent=w, action=f"Provide testimony for: {CASE}", save_as=f"testimony_{i}")
                      for i, w in enumerate(witnesses, 1)],
        "cross": [t for i in range(1, len(witnesses) + 1)
                  for t in (Task(agent=pr, action=f"Cross-examine this testimony: {{{{testimony_{i}}}}}"),
                            Task(agent=de, action=f"Redirect examination: {PREV}"))],
        "closing": [Task(agent=pr, action="Give closing argument"),
                    Task(agent=de, action=f"Give closing argument responding to: {PREV}"),
                    Task(agent=j, action="Render verdict based on: {{transcript[-2:]}}")]}
    phase = [Task(agent=j, action=f"Phase: {{{{phase.upper}}}}. Case: {CASE}"),
             route({k: v for k, v in phase_steps.items() if v}, on="phase.name", name="by_phase")]
    return AgentFlow(name="trial_simulation", memory=True, output_type=output_type,
                     steps=[*setup, loop(phase, over=[{"name": p, "upper": p.upper()} for p in phases],
                                         var_name="phase", name="phases")])


def build() -> AgentFlow:
    prosecution = Agent(agent_name="Prosecutor", system_prompt="You prosecute: precise, evidence first.")
    defense = Agent(agent_name="Defense_Attorney", system_prompt="You defend the accused: doubt, rights, detail.")
    judge = Agent(agent_name="Judge", system_prompt="You preside impartially and rule on the law and the facts.")
    witness = Agent(agent_name="Witness", system_prompt="You saw the events of the night in question.")
    return trial_simulation(prosecution, defense, judge, [witness])


if __name__ == "__main__":
    report(build(), TASK)
