"""Memory lifecycle (issue 14): erasure, trace retention, listing and export."""
