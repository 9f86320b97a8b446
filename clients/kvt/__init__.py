"""Key-value tables: Pravega's ``KeyValueTable`` API over fixed-key-length table segments.

A key-value table is a set of partitions (table segments) of one scope; keys are a primary key and
an optional secondary key of fixed lengths; keys sharing a primary key (a key family) live in one
partition and change together atomically. Modules, one concern each:

* :class:`KeyValueTableConfiguration`: the Controller API's value (``controller_api.key_value_tables``);
* :mod:`.model`: :class:`TableKey`, :class:`Version`, :class:`TableEntry`;
* :mod:`.modifications`: :class:`Insert`, :class:`Put`, :class:`Remove`;
* :mod:`.hashing`: primary key -> key-space fraction (Pravega's MurmurHash3 with Guava's seed);
* :mod:`.partitions`: the partitions and which one holds a primary key;
* :mod:`.layout`: keys <-> segment keys, every length checked on the client;
* :mod:`.table`: :class:`KeyValueTable` (reads, changes, atomic batches);
* :mod:`.iterator`: iteration by key family, ranges and prefixes;
* :mod:`.management`: create, delete, list and open tables (a mixin of the Client).

This package's ``__init__`` leaves :mod:`.management` out: it is a mixin of the Client
(``clients.client`` imports it) and needs the controller client.
"""

from controller_api.key_value_tables import KeyValueTableConfiguration

from .iterator import IteratorBuilder, KeyValueTableIterator, TableItems
from .model import TableEntry, TableKey, Version
from .modifications import Insert, Put, Remove, TableModification
from .table import KeyValueTable

__all__ = ["Insert", "IteratorBuilder", "KeyValueTable", "KeyValueTableConfiguration", "KeyValueTableIterator",
           "Put", "Remove", "TableEntry", "TableItems", "TableKey", "TableModification", "Version"]
