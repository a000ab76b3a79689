"""Everything about a chunk index, each module using only those after it: :mod:`.versions` (live index, versions,
alias moves, status), :mod:`.logs`, :mod:`.visibility` (the read path's filter), :mod:`.access` (privileges, write
blocks), :mod:`.spec` (names, templates, does an index fit the settings), :mod:`.metadata` (typed metadata)."""
