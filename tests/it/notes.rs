//! Long-term notes over HTTP.
