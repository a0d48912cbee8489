"""What students run: check and list."""
