"""Pure decisions of the REST service: how events change a job, how rows read as OpenPAI JSON."""
