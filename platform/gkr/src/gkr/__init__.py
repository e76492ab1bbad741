"""gkr: researchers submit and inspect jobs on the Meridian fleet without writing manifests."""
