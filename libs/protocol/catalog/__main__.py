"""Write the event catalog file from the models."""

from libs.protocol.catalog import CATALOG_PATH, render_catalog

CATALOG_PATH.write_text(render_catalog())
print(f"wrote {CATALOG_PATH.name}")
