"""The built-in load programs: the insert-benchmark-style workload and the fixed mixed workload."""

# The insert workload's collection: here, not in insert_workload (which imports pymongo),
# so that the command line's --collection default costs no import.
COLLECTION = "purchases_index"
