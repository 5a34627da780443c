"""The REST service's doors to the world: SQL, the bus, the secrets store."""
