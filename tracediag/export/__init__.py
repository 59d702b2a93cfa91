"""A diagnosed job written as a trace other viewers open (Perfetto, Chrome)."""
