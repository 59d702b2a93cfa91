"""Our own minimal .proto files of the trace formats we read, and the Python code generated from
them (``*_pb2.py``, committed; regenerate with ``python -m tracediag.parsers.protos.regen``)."""
