"""The Spark session Lakestate runs on (classic or Connect) and the executors' worker daemon.
Imports the top level only; pyspark is imported inside functions."""
