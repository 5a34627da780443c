"""Libraries every service may use: the job protocol, failure rules, the event backbone, web plumbing."""
