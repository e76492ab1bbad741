"""Fault tolerance across replica groups: torchft's Manager and Lighthouse, healing, gradient sync."""
