"""``bid_fn``, the deterministic scripted model the config and Ray tests share (tests/config/test_config.py's ``bid_fn``, which stored configs name, calls it)."""
import hashlib

from fsmchat.testing import Bid


def bid_fn(req):
    """A deterministic function of the request: bid and reply hashed from the agent and the messages."""
    text = "|".join(str(m.get("content")) for m in req.messages)
    h = int(hashlib.sha256(f"{req.agent}|{text}".encode()).hexdigest()[:8], 16)
    if req.tools or req.response_format:
        return Bid((h % 1000) / 1000, f"{req.agent}: point {h % 97}")
    return f"{req.agent} replies {h % 89}"
