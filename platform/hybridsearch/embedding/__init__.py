"""The bi-encoder: the model locator, device choice and file records (:mod:`.models`), the one encoder of passages
and queries (:mod:`.encoder`), the ONNX export (:mod:`.onnx`), the catalogue and ``hsp models`` (:mod:`.catalogue`,
:mod:`.fetch`), prompts (:mod:`.prompts`) and the vector cache (:mod:`.cache`).

Import from the module that holds a name (``hybridsearch.embedding.encoder.Embedder``): this package imports
nothing itself, so that the search path's light modules (:mod:`.prompts`, :mod:`.catalogue`) do not load numpy
and the encoder with them (``tests/unit/test_dependencies.py``)."""
