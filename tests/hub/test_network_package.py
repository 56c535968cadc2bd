"""The network package's size rule (issue 43): no module of ``fsmchat/network`` is over 450 lines, so
each stays one part a reader can hold (the channel's runtime, its speaking block, its resume, the hub)."""
from pathlib import Path

NETWORK = Path(__file__).resolve().parents[2] / "fsmchat" / "network"


def test_no_module_of_the_network_package_is_over_450_lines():
    sizes = {p.name: len(p.read_text().splitlines()) for p in sorted(NETWORK.glob("*.py"))}
    assert {"channel.py", "hub.py", "speaking.py", "resume.py"} <= set(sizes)
    assert {name: n for name, n in sizes.items() if n > 450} == {}
