"""``offline_env()``: the environment of a subprocess that runs this checkout's fsmchat offline (no model, task or API key inherited)."""
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def offline_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k != "FSMCHAT_MODEL" and not k.endswith("_API_KEY") and not k.startswith("FSMCHAT_TASK")}
    env.update(LITELLM_LOCAL_MODEL_COST_MAP="True", PYTHONPATH=str(ROOT), COLUMNS="100", NO_COLOR="1")
    return env
