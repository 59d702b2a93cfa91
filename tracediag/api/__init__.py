"""The Python API for notebooks and scripts: Job, Diagnosis, what-if questions."""
