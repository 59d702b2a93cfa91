"""The dependency graph: recorded and inferred edges, the critical path, replay."""
