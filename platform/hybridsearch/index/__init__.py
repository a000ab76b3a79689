"""Everything about a chunk index, read top to bottom: what it is made of, whether it fits, which version is live,
and how readers see it. Each part is imported from its module (this package re-exports nothing):

* :mod:`.metadata`: typed metadata, its mapping and the one conversion of a value to a field's type;
* :mod:`.spec`: names and versions, the templates in ``mappings/``, the :class:`~.spec.IndexSpec` an index is
  created with, the analyzer a cluster gives a new chunk index;
* :mod:`.fit`: the one fit check of chunk and log indices, and the refusal of an index that does not fit;
* :mod:`.access`: privileges checked before writing, write blocks read as blocks;
* :mod:`.logs`: the log indices (query log, ingest runs, ingest state), created, inspected and written;
* :mod:`.versions`: the one resolver of the live index, creating versions, alias swap, rollback, drop, status;
* :mod:`.visibility`: the read path's filter, so that a document is seen whole or not at all.

Copying the live version into a new one (``hsp index migrate``) writes through ingestion, so it sits above both,
in :mod:`hybridsearch.migrate`.
"""
