"""State graphs: building, validating, flattening and rendering."""
from .render import render, to_dot, to_mermaid
from .state_graph import FlatGraph, FlatState, State, StateGraph, Transition
from .turns import TurnOrder, add_turns

__all__ = ["StateGraph", "State", "Transition", "FlatGraph", "FlatState", "to_dot", "to_mermaid", "render",
           "TurnOrder", "add_turns"]
