"""Process groups inside a replica group and between groups, across regions, and their TLS."""
