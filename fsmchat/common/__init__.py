"""The plumbing every layer shares: the one rule that masks secrets (``masking``) and the lazy re-exports
and moved import paths of the package facades (``facade``). Nothing here imports the rest of fsmchat."""
