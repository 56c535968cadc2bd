"""``python -m fsmchat.cli``: the ``fsmchat`` command."""
import sys

from .main import main

sys.exit(main())
