"""``tributary loadgen``: a load generator built on Tributary's own asyncio SDK.

It runs writers and readers in one process over one or more streams, at a target
rate (or flat out), with routing keys and optionally transactions; it measures
throughput, write-acknowledgement latency (sampled), end-to-end latency and
transaction commit latency (HdrHistogram), overall and for each step of a rate
schedule, checks that readers got every event once and, per key, in order, shows
progress as it goes and writes JSON results.

Modules, one concern each: ``options`` (the validated options), ``events`` (the
event header), ``steps`` (the rate schedule and its step boundaries), ``pacing``
(token buckets, a fresh one per step), ``workload`` (writers, readers, ack
sampling), ``sequence`` (the delivery check), ``stats`` (histograms, counters,
JSON, overall and per step), ``progress`` (live line, summary tables), ``runner``
(the phases of a run) and ``command`` (what the CLI runs). See ``docs/loadgen.md``.
"""

from .command import run_command
from .options import LoadOptions, OptionError, parse_rate
from .runner import Interrupted, LoadError, LoadRun, StopSignal, run_load

__all__ = ["Interrupted", "LoadError", "LoadOptions", "LoadRun", "OptionError", "StopSignal", "parse_rate",
           "run_command", "run_load"]
