"""fsmchat."""
