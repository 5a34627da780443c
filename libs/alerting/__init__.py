"""The alerting configuration: its format, its checks and the platform's built-in one.

    config = load_config(text)      # ConfigError lists every problem with its YAML path
    default_config()                # the packaged rules.yaml, used while none is stored

One file holds rules, routes, receivers and inhibitions (Prometheus' and Alertmanager's field
names). Three parts of the platform read it: the alerter evaluates it, the REST API checks it
before storing it for the alerter, and `pai alert-rules check` checks it on the operator's
machine. Pure code: no I/O beyond reading the packaged file, no event loop, no network.
"""

from libs.alerting.config import AlertConfig, ConfigError, dump_config, load_config
from libs.alerting.defaults import default_config, default_text

__all__ = ["AlertConfig", "ConfigError", "default_config", "default_text", "dump_config", "load_config"]
