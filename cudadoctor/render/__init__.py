"""Rendering: console (rich), JSON (versioned schema) and Markdown (bug report). Redacted output."""
