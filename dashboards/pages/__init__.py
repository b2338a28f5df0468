"""One module per page: each registers itself, owns its callbacks, and builds its layout from the URL."""
