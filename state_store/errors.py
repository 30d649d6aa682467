"""Errors a user sees: each names the problem and the fix."""


class LakestateError(Exception):
    """Base of every error Lakestate raises on purpose."""


class ConfigError(LakestateError, ValueError):
    """A job definition, path or parameter is not usable."""


class JobNotFound(LakestateError, KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class JobLocked(LakestateError):
    """Another run holds the job."""


class InputError(LakestateError):
    """The source data cannot be processed; nothing was written."""


class RestoreError(LakestateError):
    """A checkpoint cannot be restored by this job definition."""
