"""The REST service: OpenPAI's REST API v2 over a SQL read model fed by job events."""
