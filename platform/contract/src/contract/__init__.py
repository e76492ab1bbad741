"""The contract between Meridian's components: what fleet generates and every consumer reads.

Standard library only. `fleet` writes these types as JSON (`make generate`);
gkr, Warden, preflight and the trainer read them and never import fleet.
"""
