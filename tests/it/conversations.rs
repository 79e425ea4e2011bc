//! Conversation memory over HTTP.
