"""The worker-side ``appellate`` commands: models, jobs and workers, auditing, probes."""
