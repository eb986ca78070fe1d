"""Parts of the embedding layer behind service/embedder.py: the fair scheduler, the ONNX backend."""
