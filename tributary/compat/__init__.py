"""Drop-in replacements of other clients' APIs, built on Tributary's asyncio SDK.

* :mod:`tributary.compat.pravega_client`: the API of the ``pravega`` PyPI package (module
  ``pravega_client``, Pravega's Rust client for Python), so that programs written for it run after
  ``import tributary.compat.pravega_client as pravega_client`` (docs/pravega_client.md).
"""
