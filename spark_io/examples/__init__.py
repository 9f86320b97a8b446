"""Runnable examples of spark_io (``python -m spark_io.examples.<name> --help``)."""
