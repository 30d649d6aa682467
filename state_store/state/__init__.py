"""State, as Flink's ``runtime/state`` keeps it: the descriptors users declare (``descriptors``), a subtask's keyed
store (``store``) and the handles over it (``handles``), operator and broadcast state (``operator``) and State
TTL (``ttl/``: its config, its rules in scalar and Arrow form, the handles' wrappers, and its Spark side). What
runs in a subtask loads no Spark; the backends that keep the state between runs are ``delta/backends``'."""
