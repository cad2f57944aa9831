"""One module per subcommand; each exposes `register(app)`. Keep imports inside the functions."""
