"""The store layer: the only code besides the migrations that holds SQL.

`writes` holds the named compare-and-set writes (each appends its own audit
events in the caller's transaction and raises `RunStateError` when the row it
guards has moved); `reads` holds the named queries the rest of the package asks.
`agentrt._db` (opening, pragmas, transactions, row decoding, the `Store` reads
that `agentrt` re-exports) belongs to this layer too.
"""
