"""preflight: tests the machines a job was given before it trains on them."""
