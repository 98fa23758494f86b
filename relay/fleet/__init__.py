"""A team of agents: team files, `relay up`/`down`/`attach`/`logs`, the supervisor, live
agent state and heartbeats (DESIGN §13, spec/fleet.md)."""
