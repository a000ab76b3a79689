"""One specification for every index the platform creates: chunk versions and the log indices.

An :class:`~hybridsearch.index_spec.spec.IndexSpec` is what an index is created with: its name, settings (the
template's plus what the engine needs: ``EngineInfo.chunk_index_settings`` and the dialect's own) and mappings, and,
for a log index, the write alias its writers go through. Everything that makes a chunk index version
(``indices.ensure_index``, ``hsp index create`` and ``migrate`` through ``lifecycle.create_version``, the
evaluation's ``choose_index``) calls :func:`~hybridsearch.index_spec.create.create_chunk_version`; everything that
asks whether an index fits the settings calls :func:`~hybridsearch.index_spec.fit.chunk_differences` (or
:func:`~hybridsearch.index_spec.fit.log_differences`); version names are read by
:func:`~hybridsearch.index_spec.names.parse_version` only.

The parts, each imported from its module:

* :mod:`.names`: version names, the log indices of a prefix and their write aliases;
* :mod:`.spec`: :class:`~.spec.IndexSpec`, the chunk and log specs, the analyzer a cluster gives a new chunk index;
* :mod:`.create`: the one creator of chunk index versions and of log indices;
* :mod:`.fit`: the one fit check, of chunk indices and of log indices;
* :mod:`.blocks`: write errors, a write block read as :class:`~hybridsearch.errors.IndexBlocked` with its fix;
* :mod:`.logs`: the log indices, which no write may create (why, and how: its docstring), inspected for
  ``hsp doctor`` and written by :class:`~.logs.LogWriter`.
"""
