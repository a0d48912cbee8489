import os

os._exit(7)
