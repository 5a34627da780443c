"""End-to-end tests: the whole embedded platform, every service a real process."""
