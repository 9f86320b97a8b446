"""A Spark driver of its own for the secured-server test: reads a stream from a server with passwords
and TLS, the password taken from an environment variable that Spark hands its Python workers
(``spark.executorEnv.NAME``), not from the driver's own environment.

    python -m tests.spark.secured_driver CONTROLLER TRUST_STORE SCOPE STREAM USER VARIABLE PASSWORD

Prints the number of events read, or one line naming the error.
"""

from __future__ import annotations

import sys

from spark_io.session import local_session


def main() -> int:
    controller, trust, scope, stream, user, variable, password = sys.argv[1:]
    spark = local_session(app="secured-driver", **{f"spark.executorEnv.{variable}": password})
    try:
        count = (spark.read.format("tributary").option("controller", controller).option("trust_store", trust)
                 .option("scope", scope).option("stream", stream).option("allow_create_stream", "false")
                 .option("username", user).option("password_env", variable).load().count())
    except Exception as error:  # noqa: BLE001 - the test reads the outcome from the output
        print(f"error: {error}".splitlines()[0])
        return 1
    finally:
        spark.stop()
    print(f"events: {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
