"""Source lines of XLA ops, from the HLO modules an XSpace carries.

XLA's events hold no source stat of their own (``../shared/traces/xplane_jax_gemm_mi300`` has
none: its stats are ``hlo_op``, ``hlo_module``, ``program_id``, ``tf_op``, ``name``,
``kernel_details``...), but the ``/host:metadata`` plane holds one event metadata per compiled
program, named ``<module>(<program id>)``, whose ``Hlo Proto`` stat is the serialized
``xla.HloProto``; each instruction's ``OpMetadata`` there states the Python ``source_file`` and
``source_line`` that traced it (JAX fills them). :func:`fill_sources` gives each event of a
plane table the line of its (``hlo_module``, ``program_id``, ``hlo_op``) as ``file:line``
(a ``source`` stat, where an event has one, wins).

Only the fields read are declared (``xla/service/hlo.proto`` numbers); the message classes are
built at import from a descriptor, so no generated module is needed.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PROGRAM = re.compile(r"^(?P<module>.+)\((?P<id>\d+)\)$")
_STRING, _INT32, _MESSAGE = 9, 5, 11
_REPEATED, _OPTIONAL = 3, 1
#: message -> (field, number, type, label, message type): the subset of hlo.proto we read.
_FIELDS = {
    "OpMetadata": [("source_file", 3, _STRING, _OPTIONAL, None),
                   ("source_line", 4, _INT32, _OPTIONAL, None)],
    "HloInstructionProto": [("name", 1, _STRING, _OPTIONAL, None),
                            ("metadata", 7, _MESSAGE, _OPTIONAL, "OpMetadata")],
    "HloComputationProto": [("instructions", 2, _MESSAGE, _REPEATED, "HloInstructionProto")],
    "HloModuleProto": [("name", 1, _STRING, _OPTIONAL, None),
                       ("computations", 3, _MESSAGE, _REPEATED, "HloComputationProto")],
    "HloProto": [("hlo_module", 1, _MESSAGE, _OPTIONAL, "HloModuleProto")],
}  # fmt: skip


def _hlo_proto_class():
    file = descriptor_pb2.FileDescriptorProto(
        name="tracediag_hlo_subset.proto", package="tracediag_hlo", syntax="proto3"
    )
    for message, fields in _FIELDS.items():
        m = file.message_type.add(name=message)
        for name, number, kind, label, type_name in fields:
            f = m.field.add(name=name, number=number, type=kind, label=label)
            if type_name:
                f.type_name = f".tracediag_hlo.{type_name}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tracediag_hlo.HloProto"))


_HloProto = _hlo_proto_class()


def hlo_sources(space) -> pd.DataFrame:
    """One row per HLO instruction with a source line: ``module``, ``program_id`` (float,
    NaN when the metadata name gives none), ``op`` and ``source`` (``file:line``). A loop over
    compiled programs and their instructions (hundreds), not over events."""
    rows = []
    for plane in space.planes:
        names = {int(k): m.name for k, m in plane.stat_metadata.items()}
        for meta in plane.event_metadata.values():
            for stat in meta.stats:
                if names.get(stat.metadata_id) != "Hlo Proto" or not stat.bytes_value:
                    continue
                module = _HloProto.FromString(stat.bytes_value).hlo_module
                named = _PROGRAM.match(meta.name)
                program = float(named.group("id")) if named else np.nan
                module_name = named.group("module") if named else module.name
                for comp in module.computations:
                    for ins in comp.instructions:
                        md = ins.metadata
                        if md.source_file:
                            line = f"{md.source_file}:{md.source_line}"
                            rows.append((module_name, program, ins.name, line))
    return pd.DataFrame(rows, columns=["module", "program_id", "op", "source"])


def fill_sources(table: pd.DataFrame, sources: pd.DataFrame) -> None:
    """Fill ``table``'s ``stat.source`` (in place) from ``sources`` by (``stat.hlo_module``,
    ``stat.program_id``, ``stat.hlo_op``); an event without a program id takes its (module,
    op)'s line when every program of that module agrees on it."""
    if not len(sources) or not len(table):
        return
    keys = pd.DataFrame(
        {
            "module": table["stat.hlo_module"].to_numpy(dtype=object),
            "program_id": table["stat.program_id"].to_numpy(dtype=np.float64),
            "op": table["stat.hlo_op"].to_numpy(dtype=object),
        }
    )
    exact = sources.drop_duplicates(["module", "program_id", "op"])
    found = keys.merge(exact, how="left", on=["module", "program_id", "op"])["source"]
    agreed = sources.groupby(["module", "op"])["source"].agg(["first", "nunique"])
    agreed = agreed[agreed["nunique"] == 1]["first"].rename("source").reset_index()
    by_op = keys[["module", "op"]].merge(agreed, how="left", on=["module", "op"])["source"]
    found = found.where(keys["program_id"].notna(), by_op).to_numpy(dtype=object)
    own = table["stat.source"].to_numpy(dtype=object)
    table["stat.source"] = np.where(pd.notna(own), own, found)
