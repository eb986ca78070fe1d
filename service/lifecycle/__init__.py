"""Memory lifecycle: erasure, trace retention, listing and export."""
