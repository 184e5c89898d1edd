"""One handler per job kind: the torch side of each kind declared in ``app.services.jobs``."""
