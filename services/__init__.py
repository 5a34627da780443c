"""The platform's independent services, each run as its own process."""
