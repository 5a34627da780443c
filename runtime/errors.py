"""The runtime's errors that more than one of its modules raises or catches.

PluginError is raised by the plugins (plugins.py, ssh.py, storage.py) and caught by running.py;
living here, it lets the plugin modules be imported without one another.
"""


class PluginError(Exception):
    """A plugin could not do its work; the message says which parameter or resource is wrong."""
