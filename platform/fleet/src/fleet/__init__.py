"""Meridian's fleet model: the spec, machine catalog, capacity math and address planner."""
