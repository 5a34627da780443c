"""The alerter: rules over events and metrics, grouped notifications, and job and node actions."""
