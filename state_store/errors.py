"""Errors a user sees: each names the problem and the fix."""


class LakestateError(Exception):
    """Base of every error Lakestate raises on purpose."""


class ConfigError(LakestateError, ValueError):
    """A job definition, path or parameter is not usable."""


class JobNotFound(LakestateError, KeyError):
    """No job of that id is registered in the warehouse's catalog; its message names the registered ones."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class JobLocked(LakestateError):
    """Another run holds the job."""


class InputError(LakestateError):
    """The source data cannot be processed; nothing was written."""


class ServerUnavailable(LakestateError):
    """The Spark Connect server a run was given does not answer, or stopped answering during the run."""


class RestoreError(LakestateError):
    """A checkpoint cannot be restored by this job definition."""


class StoredValueError(LakestateError):
    """A value read from a state table does not have its state's declared type."""


def stored_value_error(what: str, type_name: str, error: Exception, stored: str | None = None) -> StoredValueError:
    """The error for a stored value of ``what`` that is not its declared ``type_name``; ``stored``, the stored
    text, is quoted (its start only, when long)."""
    quoted = "" if stored is None else f" (stored: {stored!r})" if len(stored) <= 80 else \
        f" (stored: {stored[:60]!r}..., {len(stored)} characters)"
    return StoredValueError(
        f"{what} holds a stored value that is not its declared {type_name}: {error}{quoted}. The state table was "
        f"changed outside this job, or the state was declared again with another type: restore an earlier "
        f"checkpoint (lakestate checkpoints --job <job>), or give the state another name")


class OverBudget(LakestateError):
    """A run went over a budget its pipeline registry entry sets (``on_over_budget = "fail"``): its checkpoint
    is kept, and the message names the state or operator and the figure."""
