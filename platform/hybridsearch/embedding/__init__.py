"""The bi-encoder: models, their files and prompts, the one encoder, ONNX and the vector cache (imports nothing)."""
