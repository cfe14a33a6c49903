//! The built-in target server (placeholder).
