import os
import sys
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.pop("FSMCHAT_MODEL", None)
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from pg import pg_cluster, pg_dsn  # noqa: E402,F401  (a throwaway PostgreSQL server for the store tests)
from stores import open_store  # noqa: E402,F401  (every store kind, for the store conformance tests)
