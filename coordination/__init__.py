"""Cross-process code shared by the segment store, the controller and the clients; it may do I/O.

* :mod:`coordination.zookeeper` -- the one ZooKeeper session (kazoo bridged to asyncio, retried with a deadline);
* :mod:`coordination.cluster` -- the cluster's records in ZooKeeper (settings, registrations, the container
  map, leader election and lease paths) and the settings every process agrees on at start;
* :mod:`coordination.retry` -- the one retry policy (``Backoff``) and runner (``retry``) of every process;
* :mod:`coordination.tls_files` -- TLS files (PEM) read and checked before a listener or a client uses them.

It may import ``wire`` (the sans-IO codec and the byte formats) and nothing above it: ``server``, ``clients``,
``controller`` and ``tributary`` import it (tests/unit/test_layering.py holds the order).
"""
