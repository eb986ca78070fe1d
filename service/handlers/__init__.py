"""HTTP handlers: validated Struct in, one service call, Struct out."""
