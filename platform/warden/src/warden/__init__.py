"""Warden: finds GPU nodes that cannot train, takes them out of service, gets them repaired, returns them."""
