"""Runs a scenario of ``pravega_scenarios.py`` (the real pravega client) in a child process.

Output goes to a file (the client logs a lot); the result is the JSON on the ``RESULT`` line. A
scenario that outlives its timeout is killed by PID and the test fails with its output.
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import subprocess
import sys

from tests.support.processes import kill_process

SCENARIOS = pathlib.Path(__file__).with_name("pravega_scenarios.py")


class ScenarioFailed(AssertionError):
    pass


class Scenario:
    """One scenario process, started at construction."""

    def __init__(self, name: str, controller_uri: str, args: dict, output_path: pathlib.Path,
                 environment: dict[str, str] | None = None):
        self.name = name
        self.output_path = pathlib.Path(output_path)
        self._output = self.output_path.open("wb")
        environment = {**os.environ, "RUST_BACKTRACE": "1", **(environment or {})}
        self.process = subprocess.Popen([sys.executable, str(SCENARIOS), name, controller_uri, json.dumps(args)],
                                        stdout=self._output, stderr=subprocess.STDOUT, env=environment)

    def kill(self) -> None:
        kill_process(self.process)

    def result(self, timeout: float) -> dict:
        """Waits for the scenario's result.

        Raises:
            ScenarioFailed: it failed, printed no result, or ran past ``timeout`` (then it is killed).
        """
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            self._output.close()
            raise ScenarioFailed(f"scenario {self.name} timed out after {timeout}s:\n{self._tail()}") from None
        self._output.close()
        for line in reversed(self.output_path.read_text(errors="replace").splitlines()):
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT "):])
        raise ScenarioFailed(f"scenario {self.name} exited with {self.process.returncode}:\n{self._tail()}")

    def _tail(self) -> str:
        return self.output_path.read_text(errors="replace")[-4000:]


def run_scenario(name: str, controller_uri: str, args: dict, output_path, timeout: float = 120.0,
                 environment: dict[str, str] | None = None) -> dict:
    """Runs a scenario to its result (``environment``: variables added to the client's, e.g. its TLS trust)."""
    return Scenario(name, controller_uri, args, output_path, environment).result(timeout)


def check_each_once_in_key_order(received: list[str], count: int, keys: int) -> None:
    """Every event k<key>:<sequence> a scenario wrote (``count`` over ``keys`` keys, round-robin)
    arrived once, each key's in sequence order."""
    per_key = collections.defaultdict(list)
    for event in received:
        key, _, sequence = event.partition(":")
        per_key[key].append(int(sequence))
    assert len(received) == count, f"{len(received)} events read, {len(set(received))} distinct"
    for key in range(keys):
        expected = list(range(len(range(key, count, keys))))
        assert per_key[f"k{key}"] == expected, f"key k{key}: order broken or events missing/duplicated"
