"""HTTP routes, one module per family of OpenPAI's REST API v2."""
