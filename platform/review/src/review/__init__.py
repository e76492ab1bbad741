"""Plan review for pull requests: what a change does to every region and cluster."""
