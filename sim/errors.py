"""User-facing errors. The CLI prints any ``KvplanError`` as one line and exits with code 2;
everything else is a bug and keeps its traceback."""


class KvplanError(Exception):
    """Base class: a problem with the user's input, stated in one line."""


class ConfigError(KvplanError):
    """A config key, value or combination that cannot work (names the key)."""


class TraceFormatError(KvplanError):
    """A malformed workload file (names the file and line)."""


class DoesNotFitError(ConfigError):
    """The model (weights + activations) does not fit the GPU memory (states the numbers)."""
