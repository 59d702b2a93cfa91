"""The rule engine: rule base and registry, diagnose(), the Diagnosis, configuration."""
