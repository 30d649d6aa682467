"""A job's files and who holds it: the registered jobs, the pipeline file, the job store (plans,
checkpoints) and the lease. Imports the top level only; no Spark at load."""
