"""The Tributary segment store: listener, connections, containers, Tier-1 log and Tier-2 storage."""
