"""Parts of the embedding layer behind service/embedding/embedder.py: the fair scheduler, the ONNX backend."""
