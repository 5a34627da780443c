"""The gateway's outside world: the bus, the REST API for identities, HTTP receivers."""
