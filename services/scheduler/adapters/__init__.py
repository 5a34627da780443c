"""The scheduler's connections to the world: the bus and the leader lease."""
