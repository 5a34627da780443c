"""The web portal at OpenPAI's page addresses: a client of the public REST API and event stream."""
