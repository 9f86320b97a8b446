"""``tributary loadgen``: a load generator built on Tributary's own asyncio SDK.

It runs writers and readers in one process over one or more streams, at a target
rate (or flat out), with routing keys and optionally transactions; it measures
throughput, write-acknowledgement latency (sampled), end-to-end latency and
transaction commit latency (HdrHistogram), checks that readers got every event
once and, per key, in order, shows progress as it goes and writes JSON results.

Modules, one concern each: ``options`` (the validated options), ``events`` (the
event header), ``pacing`` (the token bucket), ``workload`` (writers, readers, ack
sampling), ``sequence`` (the delivery check), ``stats`` (histograms, counters,
JSON), ``progress`` (live line, summary table), ``runner`` (the phases of a run)
and ``command`` (what the CLI runs). See ``docs/loadgen.md``.
"""

from .command import run_command
from .options import LoadOptions, OptionError
from .runner import Interrupted, LoadError, LoadRun, StopSignal, run_load

__all__ = ["Interrupted", "LoadError", "LoadOptions", "LoadRun", "OptionError", "StopSignal", "run_command",
           "run_load"]
