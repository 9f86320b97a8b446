"""Everything that talks to a Tributary (or Pravega) server from outside: connections, SDK, loadgen."""
