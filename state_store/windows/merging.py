"""Flink's ``MergingWindowSet``: the session windows in flight for one key, each mapped to the window whose
namespace holds its state (a merge moves no state it need not: the merged windows' state folds into the state
window of one of them). Kept as the key's list state ``merging-window-set`` in the void namespace, as Flink
keeps it. No Spark here.
"""
from __future__ import annotations

from typing import Callable

from .assigners import TimeWindow, window_of_namespace

# merge(merge result, the merged windows, the result's state window, the merged state windows to fold into it)
MergeFunction = Callable[[TimeWindow, list, TimeWindow, list], None]


class MergingWindowSet:
    """The in-flight windows of the current key: ``add_window`` merges, ``persist`` writes what changed."""

    def __init__(self, assigner, state):
        self._assigner, self._state = assigner, state
        self.mapping: dict = {window_of_namespace(row["window"]): window_of_namespace(row["state_window"])
                              for row in state.get()}
        self._initial = dict(self.mapping)

    def state_window(self, window):
        """The window whose namespace holds ``window``'s state, or None when it is not in flight."""
        return self.mapping.get(window)

    def retire_window(self, window) -> None:
        """Forget ``window`` (its state was cleared or it is late)."""
        if self.mapping.pop(window, None) is None:
            raise RuntimeError(f"window {window} is not in the in-flight window set")

    def persist(self) -> None:
        """Write the set's windows back to its state, when they changed."""
        if self.mapping != self._initial:
            self._state.update([{"window": w.namespace, "state_window": s.namespace}
                                for w, s in sorted(self.mapping.items())])
            self._initial = dict(self.mapping)

    def add_window(self, new_window, merge: MergeFunction):
        """Add ``new_window``, merging it with the windows it meets; the window it ends up in. ``merge`` is called
        for each merge of windows already in flight (not for the new window alone), before the mapping is used:
        it must fold the merged state windows' state into the result's state window."""
        if new_window in self.mapping:
            # A window in flight meets no other: nothing merges, and it keeps its state window (Flink maps it to
            # itself again, the same unless a dynamic gap made a merged window of exactly this span).
            return new_window
        results = self._assigner.merge_windows(list(self.mapping) + [new_window])
        result_window, merged_new = new_window, False
        for merge_result, merged in results:
            if new_window in merged:
                merged = [w for w in merged if w != new_window]
                merged_new, result_window = True, merge_result
            # The state window of the earliest merged window in flight holds the merge's state (Flink takes any).
            state_window = self.mapping[merged[0]]
            merged_state_windows = [self.mapping.pop(w) for w in merged if w in self.mapping]
            self.mapping[merge_result] = state_window
            merged_state_windows.remove(state_window)
            # Not when one window in flight merges into itself, unchanged (the new window inside it).
            if not (len(merged) == 1 and merged[0] == merge_result):
                merge(merge_result, merged, state_window, merged_state_windows)
        if not results or (result_window == new_window and not merged_new):
            self.mapping[result_window] = result_window
        return result_window
