"""The ``fuseopt`` command (timeline summaries and plots); the launcher is
fuseopt/launcher (``fuseoptrun``)."""
