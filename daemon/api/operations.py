"""The operations the daemon serves, whatever the transport (HTTP, MCP, the hot path).

`Operations` is the list of them: one method per operation, taking and returning the
request and answer models of its family (recall_models.py, edit_models.py,
report_models.py), as daemon/api/contract.py names them. The HTTP routes, the MCP tools
and the clients each mirror that list, so it is one class; the reads and the edits are
written apart (read_operations.py, edit_operations.py), over the peer both serve and its
connections (served_peer.py).

Errors: ValueError is a bad request, NotFound an unknown decision or hash,
Conflict a request that contradicts what is stored, NotReady a daemon still
loading its index (daemon/api/errors.py).
"""

from __future__ import annotations

from dreamcycle.daemon.api.edit_operations import EditOperations
from dreamcycle.daemon.api.read_operations import ReadOperations


class Operations(ReadOperations, EditOperations):
    """Every operation, on the peer attached (`attach`) until `close`."""
