"""The API of the ``pravega`` PyPI package (module ``pravega_client``, 0.3.8) on Tributary's SDK.

Programs written for Pravega's Rust client binding run unchanged after::

    import tributary.compat.pravega_client as pravega_client

The names, arguments, defaults, return values and exception types are the binding's
(ValueError for controller errors, OSError for reader and byte stream errors,
``TxnFailedException`` for transactions that are not open). Blocking calls wait without holding
the GIL, and ``*_async`` calls never block the caller's event loop: the SDK runs on one private
event-loop thread per process (``_runtime``). docs/pravega_client.md lists what differs.
"""

from ._byte_stream import ByteStream
from ._common import TxnFailedException
from ._manager import StreamManager
from ._policies import StreamRetentionPolicy, StreamScalingPolicy
from ._reader import StreamCuts, StreamReader, StreamReaderGroup, StreamReaderGroupConfig
from ._transactions import StreamTransaction, StreamTxnWriter
from ._writer import StreamWriter

__all__ = [
    "ByteStream", "StreamCuts", "StreamManager", "StreamReader", "StreamReaderGroup", "StreamReaderGroupConfig",
    "StreamRetentionPolicy", "StreamScalingPolicy", "StreamTransaction", "StreamTxnWriter", "StreamWriter",
    "TxnFailedException",
]

for _name in __all__:  # tracebacks and reprs name the public module
    globals()[_name].__module__ = __name__
del _name
