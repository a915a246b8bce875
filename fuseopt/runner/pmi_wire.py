"""The PMI-1 wire format that MPICH's built-in client speaks
(src/pmi/maint/pmi-1.1.txt): one line per message, ``cmd=NAME key=value
...``, spaces in values escaped by a backslash; what each query's reply is
called; the sizes Hydra announces; MPICH's node map. The server that speaks
it is pmi_server.py."""
from __future__ import annotations

import re
from typing import Dict, List, Optional

# Sizes Hydra announces (src/pm/hydra/lib/pmiserv_common.h).
KVSNAME_MAX, KEYLEN_MAX, VALLEN_MAX = 256, 64, 1024

# Query -> the reply MPICH's client waits for (src/pmi/maint/pmi-1.1.txt). A
# reply of another name is an error in the client.
RESPONSE = {
    "init": "response_to_init", "initack": "initack", "get_maxes": "maxes",
    "get_appnum": "appnum", "get_my_kvsname": "my_kvsname",
    "get_universe_size": "universe_size", "put": "put_result", "get": "get_result",
    "barrier_in": "barrier_out", "finalize": "finalize_ack",
    "publish_name": "publish_result", "unpublish_name": "unpublish_result",
    "lookup_name": "lookup_result", "spawn": "spawn_result",
}


def escape(value) -> str:
    """A value as one token on the wire."""
    return str(value).replace("\n", " ").replace("\\", "\\\\").replace(" ", "\\ ")


def parse_line(line: str):
    """``cmd=put key=a value=b\\ c`` -> ('put', {'key': 'a', 'value': 'b\\ c'}).
    Values stay escaped, so what put stored goes back out by get byte for
    byte (the client unescapes it)."""
    fields: Dict[str, Optional[str]] = {}
    for token in re.findall(r"(?:\\.|[^ \\])+", line):  # split at unescaped spaces
        key, eq, value = token.partition("=")
        fields[key] = value if eq else None
    return fields.pop("cmd", None), fields


def process_mapping(nodes: List[int]) -> str:
    """MPICH's node map: each rank's node, [0,0,1,1] -> '(vector,(0,2,2))'
    (triplets of first node, node count, ranks per node)."""
    runs: List[List[int]] = []  # [node, ranks] of consecutive ranks
    for n in nodes:
        if runs and runs[-1][0] == n:
            runs[-1][1] += 1
        else:
            runs.append([n, 1])
    triplets: List[List[int]] = []
    for n, k in runs:
        if triplets and triplets[-1][2] == k and triplets[-1][0] + triplets[-1][1] == n:
            triplets[-1][1] += 1
        else:
            triplets.append([n, 1, k])
    return "(vector,%s)" % ",".join("(%d,%d,%d)" % tuple(t) for t in triplets)
