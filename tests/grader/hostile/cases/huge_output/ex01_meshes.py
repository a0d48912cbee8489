import sys

sys.__stdout__.write("x" * 30_000_000)
