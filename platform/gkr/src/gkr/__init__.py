"""gkr: researchers submit and inspect jobs on the Meridian fleet without writing manifests."""

import os

# gkr uses no pydantic plugins; looking for them scans every installed package's metadata.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
