"""What the platform's smaller HTTP services share: OpenPAI-shaped errors and their middleware."""
