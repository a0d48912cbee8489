import os
import sys

if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(
            sys.executable,
            [sys.executable, "-c", "import time; time.sleep(600)", "shardlab-hostile-daemon-7f3a"],
        )
    os._exit(0)
os.wait()
