"""``python -m fsmchat.cli``: the ``fsmchat`` command."""
import sys

from .commands import main

if __name__ == "__main__":  # importing this module (a walk over fsmchat's modules) runs nothing
    sys.exit(main())
