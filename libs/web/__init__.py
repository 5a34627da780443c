"""What the platform's smaller HTTP services share: OpenPAI-shaped errors, their middleware,
serving until stopped (on a port, an inherited listening socket or a Unix socket), and the
addresses services reach each other at (http(s):// or unix:///, addresses.py)."""
