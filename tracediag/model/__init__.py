"""The canonical model every layer shares: schema, assembly, findings, fingerprints, numeric formats, units, errors."""
