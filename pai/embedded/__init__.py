"""The embedded platform: NATS from the wheel and every service as a supervised child process."""
