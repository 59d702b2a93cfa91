"""Names of the Neuron runtime's hardware slices, shared by the system-profile readers (JSON,
runtime JSON, Perfetto)."""

from __future__ import annotations

#: Hardware events by name, for profiles that do not say their source (legacy ``type`` codes,
#: minimal third-party exports).
HARDWARE_NAMES = ("nc_exec_running", "cc_running", "cc_exec_running", "nc_exec_wait")
#: Hardware work: the NeuronCore executing a NEFF, and its collectives.
EXECUTION, COLLECTIVE = "nc_exec_running", "cc_running"
