"""_errors.py -- keel's exception classes: one per keel error code.

Every class derives from keel.Error and, where it fits, from the built-in
exception a Python program would already catch (ValueError, KeyError,
FileNotFoundError, OSError, MemoryError). The message is keel's own: what was
wrong with which value, then a line starting "help: ".
"""

import errno as _errno
import io
import os


class Error(Exception):
    """Base class of every error keel raises; ``code`` is keel's number."""

    code = None

    def __str__(self):
        # KeyError would quote the message; show keel's text as it is.
        return str(self.args[0]) if len(self.args) == 1 else super().__str__()

    @property
    def help(self):
        """The advice line of the message (without "help: "), or ''."""
        for line in str(self).splitlines():
            if line.startswith("help: "):
                return line[6:]
        return ""


class InvalidArgumentError(Error, ValueError):
    """KEEL_EINVAL: a bad argument, such as NaN in a vector or k = 0."""

    code = 1


class DimensionMismatchError(Error, ValueError):
    """KEEL_EDIM: a vector or file of other dimensions."""

    code = 2


class OptionsMismatchError(Error, ValueError):
    """KEEL_EOPTIONS: the file was made with another metric, precision,
    codes or M."""

    code = 3


class NotFoundError(Error, LookupError):
    """KEEL_ENOTFOUND: no such id, or no index at the path."""

    code = 4


class IndexNotFoundError(NotFoundError, FileNotFoundError):
    """KEEL_ENOTFOUND on open: no index file at the path."""


class IdNotFoundError(NotFoundError, KeyError):
    """KEEL_ENOTFOUND on get or delete: no live vector has the id."""


class NotAnIndexError(Error, ValueError):
    """KEEL_ENOTINDEX: the file is not a keel index."""

    code = 5


class IdInUseError(Error, ValueError):
    """KEEL_EEXIST: the id is in use."""

    code = 6


class IndexLockedError(Error, OSError):
    """KEEL_ELOCKED: another writer has the file."""

    code = 7


class ReadOnlyError(Error, io.UnsupportedOperation):
    """KEEL_EREADONLY: a write through a reader handle.

    Like writing a file opened for reading, this is both an OSError and a
    ValueError (io.UnsupportedOperation).
    """

    code = 8


class CorruptIndexError(Error, OSError):
    """KEEL_ECORRUPT: the file fails a check."""

    code = 9


def _errno_in(message, default):
    """The errno whose text (os.strerror) the message quotes, else
    default."""
    for code in sorted(_errno.errorcode):
        text = os.strerror(code)
        if text and not text.startswith("Unknown error") and text in message:
            return code
    return default


class _SystemCodeError(Error, OSError):
    """An error the system reported: errno and strerror as OSError has them,
    from the system's text in keel's message (or the class's default)."""

    _default_errno = None

    def __init__(self, *args):
        super().__init__(*args)
        message = str(args[0]) if args else ""
        self.errno = _errno_in(message, self._default_errno)
        self.strerror = (os.strerror(self.errno) if self.errno is not None
                         else None)


class IndexFullError(_SystemCodeError):
    """KEEL_EFULL: disk full, or no room for more vectors or ids.

    errno is ENOSPC (or the system's code keel quoted) when the disk is
    full, None when the index itself has no room.
    """

    code = 10

    def __init__(self, *args):
        super().__init__(*args)
        if self.errno is None and args and "disk" in str(args[0]):
            self.errno = _errno.ENOSPC
            self.strerror = os.strerror(_errno.ENOSPC)


class IndexIOError(_SystemCodeError):
    """KEEL_EIO: the system refused a read, write or sync.

    errno is the system's code when keel's message quotes it, else EIO.
    """

    code = 11
    _default_errno = _errno.EIO


class OutOfMemoryError(Error, MemoryError):
    """KEEL_ENOMEM: out of memory."""

    code = 12


class VersionError(Error, ValueError):
    """KEEL_EVERSION: the file was written by a newer keel."""

    code = 13


class CancelledError(Error):
    """KEEL_ECANCELED: a long call (add_batch, compact) was stopped, and
    changed nothing. From Python a signal stops it (Ctrl-C), and the
    signal handler's exception (KeyboardInterrupt) is raised instead."""

    code = 14


#: Exception class by keel code; [0] is the base class.
BY_CODE = (Error, InvalidArgumentError, DimensionMismatchError,
           OptionsMismatchError, IdNotFoundError, NotAnIndexError,
           IdInUseError, IndexLockedError, ReadOnlyError, CorruptIndexError,
           IndexFullError, IndexIOError, OutOfMemoryError, VersionError,
           CancelledError)

__all__ = [c.__name__ for c in BY_CODE] + ["NotFoundError",
                                           "IndexNotFoundError"]
