"""Third-party files kept as test data (each directory's README says where they come from)."""
