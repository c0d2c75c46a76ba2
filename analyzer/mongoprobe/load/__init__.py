"""The built-in load programs: the insert-benchmark-style workload and the fixed mixed workload."""
