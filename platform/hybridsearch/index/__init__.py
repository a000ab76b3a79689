"""Everything about a chunk index, each module using only those listed after it: :mod:`.versions` (the live
index, versions, alias moves, status), :mod:`.logs` (the log indices), :mod:`.visibility` (the read path's
filter), :mod:`.access` (privileges and write blocks), :mod:`.fit` (does an index fit the settings),
:mod:`.spec` (names, templates, specs), :mod:`.metadata` (typed metadata). Nothing is re-exported here.
"""
