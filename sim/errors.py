"""kvplan's error policy: whose fault is it, and what does the user see.

1. **User errors** are ``KvplanError`` subclasses, raised where the bad input is found, with a
   one-line message that names what is wrong and where: the config key (``kv_cache.block_size:
   expected an integer >= 1, got 0``), the file and line (``trace.csv:3: ContextTokens is 'abc',
   not an integer``), or the flag. The CLI (``kvplan/cli/main.py``) prints ``error: <message>`` on
   stderr and exits 2; the dashboard shows the message under the widget that set the key.
2. **Files the user named** that cannot be read (missing, a directory, no permission, binary
   where text is expected) are user errors too. Readers raise ``InputFileError`` (or a subclass)
   naming the file; an ``OSError`` that still reaches the CLI is printed as ``path: reason``,
   exit 2.
3. **Everything else is a bug in kvplan**: a broken invariant is an ``AssertionError`` or a
   ``RuntimeError``, never a ``KvplanError``. The CLI prints one line, ``internal error (a bug in
   kvplan, please report): ...``, and exits 1; ``KVPLAN_DEBUG=1`` shows the traceback.

Nothing already written is removed or overwritten by a failing command: inputs are checked
before outputs are opened, and results are serialised before their file is written.

Library code catches only the specific errors it means to handle (never ``except Exception``),
so that a bug is not reported as a user error, or the other way round.
"""

from __future__ import annotations


class KvplanError(Exception):
    """Base class: a problem with the user's input, stated in one line."""


class ConfigError(KvplanError):
    """A config key, value or combination that cannot work (names the key)."""


class DoesNotFitError(ConfigError):
    """The model (weights + activations) does not fit the GPU memory (states the numbers)."""


class InputFileError(KvplanError):
    """A file the user named cannot be used: missing, a directory, unreadable, not text, or
    malformed (names the file, and the line when one line is at fault)."""


class TraceFormatError(InputFileError):
    """A workload trace that is missing or malformed (names the file and line)."""


def file_error(path: object, exc: OSError | UnicodeDecodeError,
               cls: type[InputFileError] = InputFileError) -> InputFileError:
    """``InputFileError("path: reason")`` for an error raised while opening or reading ``path``
    (readers raise it ``from None``: the reason is the message, the traceback is noise)."""
    if isinstance(exc, UnicodeDecodeError):
        reason = f"not a UTF-8 text file ({exc.reason} at byte {exc.start})"
    elif isinstance(exc, FileNotFoundError):
        reason = "not found"
    elif isinstance(exc, IsADirectoryError):
        reason = "is a directory, expected a file"
    elif isinstance(exc, PermissionError):
        reason = "permission denied"
    else:
        reason = exc.strerror or str(exc)
    return cls(f"{path}: {reason}")
