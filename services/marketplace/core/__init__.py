"""The marketplace's pure rules: items, rights, what a write changes, the job that uses an item."""
