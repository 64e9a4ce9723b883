"""Graph passes by family, registered by name (see registry.py); `workbench passes` lists them."""
