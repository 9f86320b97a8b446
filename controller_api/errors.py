"""The errors the Controller API's values raise: the root of the SDK's error hierarchy and InvalidArgument.

They live here, below the SDK, because the values' validating constructors (:mod:`.model`) raise
InvalidArgument; ``clients.errors`` re-exports both and builds the rest of the hierarchy on them.
"""

from __future__ import annotations


class TributaryError(Exception):
    """Base of every error raised by Tributary's clients.

    ``retriable`` is True when the same call may succeed if tried again later.
    """

    retriable = False


class InvalidArgument(TributaryError, ValueError):
    """A call's argument breaks a rule: an invalid name, a bad option, an out-of-range value."""
