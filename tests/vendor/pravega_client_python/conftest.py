"""The vendored test files are test data, not tests of this suite: they need a Pravega-compatible server on
127.0.0.1:9090 and a ``pravega_client`` module. tests/integration/test_pravega_client_compat.py runs them
against Tributary's ``tributary.compat.pravega_client``, in a network namespace of their own."""

collect_ignore = ["pravega_client_test.py", "pravega_reader_test.py"]
