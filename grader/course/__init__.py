"""The course model: the catalog, where the trees live, device forcing, stubs and the self-check."""
