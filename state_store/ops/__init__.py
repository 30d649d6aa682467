"""The job operations besides a run: savepoint, restore and rescale, compaction, the state processor,
housekeeping. Imports the top level, ``state``, ``catalog``, ``spark`` and ``delta``; never ``run``."""
