"""The scheduler's connections to the world: the bus's leader lease, and the control plane's
configuration in KV and file and its answers over request/reply (control.py)."""
