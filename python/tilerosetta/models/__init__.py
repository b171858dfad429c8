"""End-to-end models built from TileRosetta ops (issue 14). See models/llama.py."""
