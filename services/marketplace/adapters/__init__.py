"""What the marketplace does with the world: SQL, the bus, the REST API, the starter files."""
