"""The marketplace: job templates and data sets shared privately, with groups, or publicly."""
