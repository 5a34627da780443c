"""What the platform's smaller HTTP services share: OpenPAI-shaped errors, their middleware, and
serving until stopped."""
