"""Libraries shared by every service: the protocol, the event backbone and the command line."""
