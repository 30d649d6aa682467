"""Streaming SQL (issue 62, part 2): a job defined by SQL text, parsed by sqlglot in Flink's dialect
(``dialect``) and compiled to Lakestate's operators (``compile``), its stateless parts evaluated by Spark where
the records are read (``sources.query``)."""
