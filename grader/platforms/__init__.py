"""Builders that package the course for a platform: handout, nbgrader, Gradescope."""
