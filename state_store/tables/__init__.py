"""Updating results (issue 62): operators with Flink SQL's semantics whose output is a changelog
(``state_store.changelog``), on keyed state like every operator's."""
