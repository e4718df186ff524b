"""The run graph's nodes, one module per job (``agent/run/graph.py`` wires them; docs/ARCHITECTURE.md).

Each node is a plain function ``(state, rt) -> update``: ``state`` is the checkpointed ``RunState``,
``rt`` the process's ``Runtime`` (host, catalogs, transcript), and the update is a partial state. Each
module's docstring lists every side effect its node has.
"""
