"""The product's entrypoints, named as users call it: the `pai` command (cli/) and `pai up`'s
one-machine platform (embedded/). They sit above the services they start and talk to; no
service and no library imports them (.importlinter)."""
