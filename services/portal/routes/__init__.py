"""The portal's routes, one module per concern; app.py composes them."""
