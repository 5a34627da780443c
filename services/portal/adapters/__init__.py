"""The portal's outside world: the REST API it speaks for the signed-in user."""
