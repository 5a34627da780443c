"""The alerter's ways out: email, webhooks, job and node actions, and the rule store."""
