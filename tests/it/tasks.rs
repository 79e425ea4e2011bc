//! Task memory over HTTP.
