"""Child processes and the live system: the tracers, collectors, the target, record, the run folder."""
