//! Detail memory over HTTP.
