"""Files, worker pools and protobuf wire helpers: the plumbing below the readers."""
