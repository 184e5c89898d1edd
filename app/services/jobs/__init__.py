"""The jobs wing: the job queue and one module per job kind.

:mod:`app.services.jobs.queue` claims and leases rows; each kind's module holds its name, typed
parameters, enqueue function and description. The work itself runs in ``workers``.
"""
