"""The Controller API's contract, shared by the SDK (``clients``), the controller and anything else that speaks it.

* ``controller.proto`` and the stubs generated from it (``controller_pb2``, ``controller_pb2_grpc``:
  regenerate them with ``scripts/generate_grpc_stubs.py``, never edit them);
* :mod:`.model`: the API's stream values (scaling and retention policies, stream configurations);
* :mod:`.key_value_tables`: a key-value table's configuration;
* :mod:`.reader_groups`: a reader group's data retention and registered configuration;
* :mod:`.protobuf`: the one mapping between those values and the protobuf messages;
* :mod:`.errors`: the root of the SDK's errors and the one the values' constructors raise.

This package imports only ``wire``, grpc and protobuf: never ``clients``, ``controller`` or ``server``.
"""
