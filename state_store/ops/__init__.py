"""The job operations besides a run: savepoint, restore and rescale, compaction, the state processor,
housekeeping. Imports the top level, ``ttl``, ``catalog``, ``spark`` and ``delta``; never ``run``."""
