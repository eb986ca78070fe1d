-- Extensions Haki needs: pgvector for embeddings and HNSW indexes.
CREATE EXTENSION IF NOT EXISTS vector;
