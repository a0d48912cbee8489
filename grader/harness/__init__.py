"""The trusted harness: shardlab's pytest plugin, categories, and the implementation under test."""
