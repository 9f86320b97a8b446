"""The one error type the codec raises for malformed input."""


class ProtocolError(Exception):
    """Bytes that are not a valid frame sequence of the wire protocol.

    Raised by every decoding entry point of ``wire`` for any malformed input:
    unknown type codes, frames over the size limit, truncated or inconsistent
    payloads, invalid strings, append-block sequencing violations. A server
    answers it by closing that one connection (Pravega replies nothing).
    """
